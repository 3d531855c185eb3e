#!/usr/bin/env bash
# H100: the `slow` TMA config test (every prefill config of the search space on the TMA path, verbose), then
# the package's TMA path on the interleaved (FlashInfer) and separate (vLLM FlashAttention) cache layouts,
# 2 vs 3 stages, beside this experiment's own kernel (benchmarks/experiments/prefill_tma.py).
set -u
. benchmarks/device/setup.sh || exit 1
timeout 330 python3 -m pytest tests/kernels/test_gpu.py -m slow -k tma_loads -v -p no:cacheprovider -rf \
  > "$OUT/kernels_gpu_tma_slow.txt" 2>&1; grep -E "PASS|FAIL|passed|failed|Error" "$OUT/kernels_gpu_tma_slow.txt" | cut -c1-300
V="pkg/page128/tma,pkg/page128/tma/st3,pkg/page128/tma/sep,pkg/page128/tma/sep/st3,tma2/page128/s2,tma2i/page128/s2"
timeout 200 python3 benchmarks/experiments/prefill_tma.py 170 "$V" 2>&1 | tee "$OUT/prefill_tma_layout.txt" | grep -v "^$"
