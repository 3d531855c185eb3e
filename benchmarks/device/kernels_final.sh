#!/usr/bin/env bash
# H100: every kernels GPU test (not `slow`), then kernels_bench floors/prefill/turboquant/error with the
# current auto tactics; an optional experiment script (first argument) runs last with what time is left.
set -u
export FLASHINFER_WORKSPACE_BASE="$PWD/.fi-cache"
. benchmarks/device/setup.sh || exit 1
start=$(date +%s); left() { echo $(( ${BUDGET:-560} - ($(date +%s) - start) )); }
timeout 200 python3 -m pytest tests/kernels/test_gpu.py -m "gpu and not slow" -q -p no:cacheprovider -rf \
  > "$OUT/kernels_gpu_tests.txt" 2>&1; tail -6 "$OUT/kernels_gpu_tests.txt" | cut -c1-400
timeout 200 python3 benchmarks/kernels_bench.py --sections floors,prefill,turboquant,error --fi-decode fa2,fa2-tc \
  --fi-prefill none --out "$OUT/kernels_h100.json" 2>&1 | grep -v "^$" | tail -30
if [ -n "${1:-}" ]; then timeout $(( $(left) - 5 )) python3 "$1" $(( $(left) - 60 )) 2>&1 | tee "$OUT/experiment.txt" | tail -12; fi
