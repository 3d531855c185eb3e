#!/usr/bin/env bash
# First contact with a GPU: the GPU tests, the harness-vs-peer check, and one bench per FlashInfer tactic.
set -u
. benchmarks/device/setup.sh || exit 1
python3 -m pytest -q -m gpu tests/probes/test_faults.py 2>&1 | tail -5
python3 benchmarks/harness_vs_flashinfer.py --out "$OUT/harness_vs_flashinfer.json" 2>&1 | tail -12
H="--num-heads 32 --num-kv-heads 8 --head-size 128 --time-cap 1"
for args in "--phase decode --batch 64 --context 2048" "--phase prefill --batch 1 --context 2048" \
            "--phase mixed --batch 8 --context 4096 --query-len 512" ; do
  python3 -m hwtune bench attention --backend FLASHINFER $H $args --json > "$OUT/fi_$(echo $args | tr -d ' -')".json 2> "$OUT/fi_err.txt"
  python3 - "$OUT/fi_$(echo $args | tr -d ' -')".json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    s = r["stats"] or {}
    print(f"{r['workload']['phase']:8s} {r['backend']}/{r['tactic']:10s} {r['status']:12s} {s.get('median_us', 0):9.2f} us  compile {r['compile_time_s'] or 0:6.1f}s  {r['message'][:150]}")
PY
done
