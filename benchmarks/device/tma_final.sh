#!/usr/bin/env bash
# H100, final state of the TMA KV path (auto config, 3 stages): the TMA grid cases, kernels_bench floors and
# prefill at 128-token pages beside FlashInfer fa3 on the same pages, and the probes' harness on 4096-token
# prefill at 128- and 16-token pages.
set -u
export FLASHINFER_WORKSPACE_BASE="$PWD/.fi-cache"
. benchmarks/device/setup.sh || exit 1
timeout 100 python3 -m pytest tests/kernels/test_gpu.py -m "gpu and not slow" -k "tma or page128" -q \
  -p no:cacheprovider -rf > "$OUT/kernels_gpu_tma.txt" 2>&1; tail -2 "$OUT/kernels_gpu_tma.txt" | cut -c1-600
timeout 330 python3 benchmarks/kernels_bench.py --sections floors,prefill --page 128 --fi-prefill fa3 \
  --out "$OUT/kernels_prefill_page128.json" 2>&1 | grep -v "^$" | tail -12
H="--num-heads 32 --num-kv-heads 8 --head-size 128 --time-cap 1 --json"
run() { f="$OUT/h_$1.json"; shift; timeout 100 python3 -m hwtune bench attention $H "$@" >> "$f" 2>>"$OUT/h_err.txt"; }
run ta_prefill_p128 --backend TRITON_ATTN -t auto --phase prefill --batch 1 --context 4096 --query-len 4096 --block-size 128
run ta_prefill_p16 --backend TRITON_ATTN -t auto --phase prefill --batch 1 --context 4096 --query-len 4096
python3 benchmarks/device/print_records.py "$OUT"
tail -3 "$OUT/h_err.txt" 2>/dev/null | cut -c1-300
