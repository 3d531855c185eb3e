#!/usr/bin/env bash
# Run (or resume) a tuning plan into a SQLite store that travels back through $OUT.
# Usage: tune_round.sh PLAN_ARGS... ; env: DB (default $OUT/h100.db), LIMIT seconds for the tune (default 480),
# PRE (a command to run first). The store comes back as DB plus an export (JSON Lines).
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
