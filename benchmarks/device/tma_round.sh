#!/usr/bin/env bash
# H100 round for issue 5 after the TMA KV path: the kernels GPU tests (not `slow`) and the `slow` TMA config
# test, kernels_bench prefill at 128-token pages (auto tactic: TMA, 2 stages) beside the measured matmul
# rate, the same-run A/B of benchmarks/experiments/prefill_tma.py, and the probes' harness on 4096-token
# prefill at 128-token pages (auto tactic) and, for comparison, FlashInfer fa3 there when $FA3 is set.
set -u
export FLASHINFER_WORKSPACE_BASE="$PWD/.fi-cache"
. benchmarks/device/setup.sh || exit 1
timeout 240 python3 -m pytest tests/kernels/test_gpu.py -m "gpu and not slow" -q -p no:cacheprovider -rf \
  > "$OUT/kernels_gpu_tests.txt" 2>&1; tail -4 "$OUT/kernels_gpu_tests.txt" | cut -c1-600
timeout 120 python3 -m pytest tests/kernels/test_gpu.py -m slow -k tma -q -p no:cacheprovider -rf \
  > "$OUT/kernels_gpu_tma_slow.txt" 2>&1; tail -3 "$OUT/kernels_gpu_tma_slow.txt" | cut -c1-600
timeout 150 python3 benchmarks/kernels_bench.py --sections floors,prefill --page 128 --fi-prefill "${FA3:-none}" \
  --out "$OUT/kernels_prefill_page128.json" 2>&1 | grep -v "^$" | tail -12
timeout 150 python3 benchmarks/experiments/prefill_tma.py 130 "pkg/page16,pkg/page128,pkg/page128/tma,tma2/page128/s2" \
  2>&1 | tee "$OUT/prefill_tma_ab.txt" | grep -v "^$"
H="--num-heads 32 --num-kv-heads 8 --head-size 128 --time-cap 1 --json"
run() { f="$OUT/h_$1.json"; shift; timeout 120 python3 -m hwtune bench attention $H "$@" >> "$f" 2>>"$OUT/h_err.txt"; }
run ta_prefill_p128 --backend TRITON_ATTN -t auto --phase prefill --batch 1 --context 4096 --query-len 4096 --block-size 128
run ta_prefill_p16 --backend TRITON_ATTN -t auto --phase prefill --batch 1 --context 4096 --query-len 4096
python3 benchmarks/device/print_records.py "$OUT"
tail -3 "$OUT/h_err.txt" 2>/dev/null | cut -c1-300
