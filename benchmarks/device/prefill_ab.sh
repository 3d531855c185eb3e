#!/usr/bin/env bash
# Same-node A/B of TRITON_ATTN prefill: an earlier commit of the kernels against the working tree, rounds
# alternated (node-to-node differences on the lent H100s reach 5 %, more than the changes measured).
# Before the device call, here:   git archive <commit> hwtune benchmarks/kernels_bench.py | tar -x -C ab_old
# (ab_old/ is listed in .git/info/exclude; name it in `carry`). Runs the kernels GPU tests first.
set -u
. benchmarks/device/setup.sh >/dev/null || exit 1
[ -d ab_old/hwtune ] || { echo "ab_old/ is missing: see this script's header"; exit 2; }
base=$PWD
timeout 220 python3 -m pytest tests/probes/kernels/test_gpu.py -m "gpu and not slow" -q -p no:cacheprovider -rf \
  2>&1 | tail -3 | cut -c1-300
for round in 1 2; do
  for side in old new; do
    if [ $side = old ]; then dir=$base/ab_old; else dir=$base; fi
    echo "== round $round: $side"
    (cd "$dir" && PYTHONPATH="${PYTHONPATH%%:*}:$dir" \
      timeout 120 python3 benchmarks/kernels_bench.py --sections prefill --fi-prefill none \
      --out "$OUT/ab_${side}_$round.json" 2>&1 | grep "bfloat16" | cut -c1-70)
  done
done
