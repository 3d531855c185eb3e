#!/usr/bin/env bash
# Kernels on a GPU: their tests, the adapters through hwtune bench, the decode benchmark; the harness check.
set -u
. benchmarks/device/setup.sh || exit 1
timeout 240 python3 -m pytest tests/kernels -m "gpu and not slow" -q --maxfail=15 -p no:cacheprovider \
  > "$OUT/kernels_gpu_tests.txt" 2>&1; tail -25 "$OUT/kernels_gpu_tests.txt" | cut -c1-300
timeout 120 python3 benchmarks/harness_vs_flashinfer.py --out "$OUT/harness_vs_flashinfer.json" 2>&1 | grep -v '^{' | tail -8
H="--num-heads 32 --num-kv-heads 8 --head-size 128 --time-cap 1"
for b in TRITON_ATTN FLASHINFER; do for args in "--phase decode --batch 64 --context 8192" "--phase decode --batch 16 --context 32768" "--phase prefill --batch 1 --context 4096"; do
  f="$OUT/b_${b}_$(echo $args | tr -d ' -').json"
  timeout 200 python3 -m hwtune bench attention --backend $b $H $args --json > "$f" 2>>"$OUT/bench_err.txt"
  python3 -c "
import json,sys
for r in json.load(open('$f')):
    s=r['stats'] or {}; w=r['workload']
    print(f\"{w['phase']:7s} b{w['batch']:<3d} ctx{w['context_len']:<6d} {r['backend']}/{r['tactic']:9s} {r['status']:12s} {s.get('median_us',0):9.2f} us  {r['timing_method']} {(r['extra'] or {}).get('config','')} {r['message'][:200]}\")
" 2>&1 | tail -8
done; done
tail -3 "$OUT/bench_err.txt"
timeout 150 python3 benchmarks/kernels_bench.py --sections floors,decode,memory --out "$OUT/k_decode.json" 2>&1 | tail -30
