#!/usr/bin/env bash
# H100 round for issue 5's prefill target: every kernels GPU test (not `slow`) after a kernel change, the
# prefill section of kernels_bench (auto tactic vs the measured matmul rate), then the loop-structure A/B of
# benchmarks/experiments/prefill_variants.py for the variants named in $1 (default: all).
set -u
export FLASHINFER_WORKSPACE_BASE="$PWD/.fi-cache"
. benchmarks/device/setup.sh || exit 1
timeout 220 python3 -m pytest tests/kernels/test_gpu.py -m "gpu and not slow" -q -p no:cacheprovider -rf \
  > "$OUT/kernels_gpu_tests.txt" 2>&1; tail -6 "$OUT/kernels_gpu_tests.txt" | cut -c1-400
timeout 150 python3 benchmarks/kernels_bench.py --sections floors,prefill --fi-prefill none \
  --out "$OUT/kernels_prefill.json" 2>&1 | grep -v "^$" | tail -12
timeout 240 python3 benchmarks/experiments/prefill_variants.py 220 "${1:-}" 2>&1 | tee "$OUT/variants.txt" | grep -v "^$"
