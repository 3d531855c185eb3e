#!/usr/bin/env bash
# H100 round for issue 4's last gaps and the cold-selection figure: an optional experiment script (first
# argument), the gap plan (FLEX_ATTENTION on HND / spec decode / DCP, TORCH_SDPA flash at batch > 1) into
# $OUT/gaps.db + its JSON Lines export, then benchmarks/regret.py's score step (warm and cold selection
# latency on this host) over stores rebuilt from the committed tune exports.
set -u
export FLASHINFER_WORKSPACE_BASE="$PWD/.fi-cache"
. benchmarks/device/setup.sh || exit 1
if [ -n "${1:-}" ]; then timeout 280 python3 "$1" 200 2>&1 | tee "$OUT/experiment.txt" | grep -v "^$" | tail -30; fi
DB="$OUT/gaps.db"
timeout -s INT 200 python3 -m hwtune tune --db "sqlite:///$DB" --plan benchmarks/plans/probes_h100_gaps.toml \
  --kinds attention --time-cap 0.6 2>&1 | grep -v "━" | tail -25
python3 -m hwtune show --db "sqlite:///$DB" 2>&1 | tail -20
python3 -m hwtune db export "$OUT/probes_gaps.jsonl" --db "sqlite:///$DB" 2>&1 | tail -2
R=/tmp/regret; mkdir -p $R
python3 -m hwtune db import benchmarks/results/tune_train_h100_2026-11-21.jsonl --db "sqlite:///$R/train.db" | tail -1
python3 -m hwtune db import benchmarks/results/tune_oracle_h100_2026-11-21.jsonl --db "sqlite:///$R/oracle.db" | tail -1
timeout 120 python3 benchmarks/regret.py --out $R --steps score 2>&1 | tail -8; cp $R/regret.json "$OUT/regret_latency.json"
