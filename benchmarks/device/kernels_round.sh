#!/usr/bin/env bash
# H100 round for issue 5: TURBOQUANT's GPU tests (after the centred-code fix), TURBOQUANT speed and error
# (kernels_bench turboquant,error), then the rest of the kernels' GPU tests. An optional experiment script
# (first argument, e.g. an A/B of kernel variants kept out of the repo) runs after the TURBOQUANT tests.
# FlashInfer's JIT cache is kept in .fi-cache (ignored; carry it) and returned as $OUT/fi-cache.tgz.
set -u
export FLASHINFER_WORKSPACE_BASE="$PWD/.fi-cache"
. benchmarks/device/setup.sh || exit 1
start=$(date +%s); left() { echo $(( ${BUDGET:-560} - ($(date +%s) - start) )); }
timeout 120 python3 -m pytest tests/kernels/test_gpu.py -m "gpu and not slow" -q -p no:cacheprovider \
  -k "tq or turboquant" > "$OUT/kernels_tq_tests.txt" 2>&1; tail -15 "$OUT/kernels_tq_tests.txt" | cut -c1-400
if [ -n "${1:-}" ]; then timeout 150 python3 "$1" 140 2>&1 | tee "$OUT/experiment.txt" | grep -v "^$" | tail -40; fi
timeout $(( $(left) - 100 )) python3 benchmarks/kernels_bench.py --sections floors,turboquant,error --fi-decode fa2,fa2-tc \
  --out "$OUT/k_tq.json" 2>&1 | grep -v "^$" | tail -25
timeout $(( $(left) - 10 )) python3 -m pytest tests/kernels/test_gpu.py -m "gpu and not slow" -q \
  -p no:cacheprovider -k "not tq and not turboquant" -rf > "$OUT/kernels_rest_tests.txt" 2>&1
tail -8 "$OUT/kernels_rest_tests.txt" | cut -c1-400
tar czf "$OUT/fi-cache.tgz" .fi-cache 2>/dev/null; ls -la "$OUT"
