#!/usr/bin/env bash
# Run (or resume) a tuning plan into a SQLite store that travels back through $OUT. Device kind:
# nvidia-h100-x1 for the attention plans of docs/probes.md "Measured on an H100" (benchmarks/plans/*.toml,
# 562 records in benchmarks/results/probes_h100_2026-11-21.jsonl). Carry .whl and .fi-cache, and .device-db/
# to resume a store (.device-db/h100.db is copied to $DB when $DB does not exist yet).
#
#   bash benchmarks/device/tune.sh --plan benchmarks/plans/probes_h100.toml --kinds attention
#
# Every argument goes to `hwtune tune`. Environment: DB (default $OUT/h100.db), LIMIT seconds for the tune
# (default 480; it is then interrupted with SIGINT and resumes next time with --resume), PRE (a command to
# run first), EXPORT (default $DB with .jsonl for .db: the store as the JSON Lines file kept in benchmarks/results/,
# exported here, where the carried packages are on the path). The store comes back as $DB, checkpointed (no -wal /
# -shm files).
set -u
. benchmarks/device/setup.sh || exit 1
DB="${DB:-$OUT/h100.db}"
if [ -f .device-db/h100.db ] && [ ! -f "$DB" ]; then cp .device-db/h100.db "$DB"; fi
[ -n "${PRE:-}" ] && eval "$PRE"
timeout -s INT "${LIMIT:-480}" python3 -m hwtune tune --db "sqlite:///$DB" "$@" 2>&1 | grep -v "━" | tail -45
python3 -m hwtune db status --db "sqlite:///$DB" 2>&1 | tail -8
python3 - "$DB" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()
PY
rm -f "$DB-wal" "$DB-shm"
EXPORT="${EXPORT:-${DB%.db}.jsonl}"
python3 -m hwtune db export "$EXPORT" --db "sqlite:///$DB" > "$OUT/export.log" 2>&1 || echo "export to $EXPORT failed:"
tail -2 "$OUT/export.log"
