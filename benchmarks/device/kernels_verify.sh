#!/usr/bin/env bash
# H100: every kernels GPU test (not `slow`); kernels_bench decode (TRITON_ATTN vs FlashInfer fa2 / fa2-tc);
# TURBOQUANT 4-bit (NHD and HND) and TRITON_ATTN through the probes' harness (`hwtune bench attention`:
# correctness gate, cold L2, graph replay) beside FLASHINFER on the same workloads.
set -u
export FLASHINFER_WORKSPACE_BASE="$PWD/.fi-cache"
. benchmarks/device/setup.sh || exit 1
timeout 200 python3 -m pytest tests/kernels/test_gpu.py -m "gpu and not slow" -q -p no:cacheprovider -rf \
  > "$OUT/kernels_gpu_tests.txt" 2>&1; tail -6 "$OUT/kernels_gpu_tests.txt" | cut -c1-400
timeout 150 python3 benchmarks/kernels_bench.py --sections floors,decode --fi-decode fa2,fa2-tc \
  --out "$OUT/kernels_decode.json" 2>&1 | grep -v "^$" | tail -16
H="--num-heads 32 --num-kv-heads 8 --head-size 128 --time-cap 1 --json"
run() { f="$OUT/h_$1.json"; shift; timeout 150 python3 -m hwtune bench attention $H "$@" >> "$f" 2>>"$OUT/h_err.txt"; }
for L in NHD HND; do
  run tq_$L --backend TURBOQUANT --kv-cache-dtype turboquant_4bit --kv-layout $L --phase decode --batch 16 --context 32768
  run fi_$L --backend FLASHINFER -t fa2-tc --kv-layout $L --phase decode --batch 16 --context 32768
done
run ta_prefill --backend TRITON_ATTN -t auto --phase prefill --batch 1 --context 4096 --query-len 4096
python3 benchmarks/device/print_records.py "$OUT"
tail -3 "$OUT/h_err.txt" 2>/dev/null
