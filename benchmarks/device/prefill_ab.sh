#!/usr/bin/env bash
# Same-node A/B of TRITON_ATTN prefill: an earlier commit of the kernels against the working tree, rounds
# alternated (node-to-node differences on the lent H100s reach 5 %, more than the changes measured).
# Before the device call, here:   git archive <commit> hwtune benchmarks/kernels_bench.py | tar -x -C ab_old
# (ab_old/ is listed in .git/info/exclude; name it in `carry`). Runs the kernels GPU tests first (TESTS:
# a pytest -k expression, default all). SECTIONS (default prefill) picks kernels_bench sections; FI, if set
# (e.g. "--fi-decode fa2,fa2-tc"), adds FlashInfer to the last "new" round only (its JIT builds cost 40 s+).
set -u
. benchmarks/device/setup.sh >/dev/null || exit 1
[ -d ab_old/hwtune ] || { echo "ab_old/ is missing: see this script's header"; exit 2; }
base=$PWD
timeout 220 python3 -m pytest tests/kernels/test_gpu.py -m "gpu and not slow" -q -p no:cacheprovider -rf \
  -k "${TESTS:-}" 2>&1 | tail -3 | cut -c1-300
for round in 1 2; do
  for side in old new; do
    if [ $side = old ]; then dir=$base/ab_old; else dir=$base; fi
    fi_flags="--fi-decode none --fi-prefill none"
    [ $round = 2 ] && [ $side = new ] && [ -n "${FI:-}" ] && fi_flags="--fi-prefill none $FI"
    echo "== round $round: $side"
    (cd "$dir" && PYTHONPATH="${PYTHONPATH%%:*}:$dir" \
      timeout 150 python3 benchmarks/kernels_bench.py --sections "${SECTIONS:-prefill}" $fi_flags \
      --out "$OUT/ab_${side}_$round.json" 2>&1 | grep -E "bfloat16|float8" | cut -c1-${WIDTH:-70})
  done
done
