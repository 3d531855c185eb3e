#!/usr/bin/env bash
# hwtune's Triton kernels (TRITON_ATTN, TURBOQUANT) on one GPU. Device kind: nvidia-h100-x1 (every figure in
# docs/kernels.md is from an NVIDIA H100 80GB HBM3). Carry .whl (setup.sh) and .fi-cache (FlashInfer's JIT
# cache, kept between calls: its fa3 build alone takes 80-95 s).
#
#   bash benchmarks/device/kernels.sh SECTION [SECTION ...]      sections run in the order given
#
# section            what it runs                                                 feeds docs/kernels.md
# tests              tests/kernels/test_gpu.py -m "gpu and not slow" [-k $TESTS]     Current figures: GPU tests
# tests-slow         tests/kernels/test_gpu.py -m slow [-k $TESTS] (TESTS=tma_loads:  Current figures: GPU tests
#                    the 3 TMA config tests, about 1 min; all 11 take longer)
# decode             kernels_bench floors,decode beside FlashInfer fa2 / fa2-tc      Current figures: decode
# prefill            kernels_bench floors,prefill, 16-token pages, no FlashInfer     Current figures: prefill
# page128            kernels_bench floors,prefill, 128-token pages, FlashInfer fa3   Current figures: prefill
# decode-prefill-fa3 kernels_bench floors,decode,prefill, FlashInfer fa2 / fa2-tc     Current figures: decode
#                    decode and fa3 prefill (16-token pages)                        and prefill
# turboquant         kernels_bench floors,prefill,turboquant,error, FlashInfer         Current figures: TURBOQUANT
#                    fa2 / fa2-tc decode
# memory             kernels_bench memory (cache bytes per token)                   Current figures: memory
# harness            hwtune bench attention: TURBOQUANT 4-bit and FLASHINFER fa2-tc,  Current figures: decode,
#                    16 x 32k decode, NHD and HND; TRITON_ATTN 4096-token prefill      TURBOQUANT
# harness-tma        hwtune bench attention: TRITON_ATTN 4096-token prefill on 128-    Current figures: prefill
#                    and 16-token pages
# harness-fp8        hwtune bench attention: TRITON_ATTN and FLASHINFER fa2-tc, fp8    Current figures: decode
#                    KV, 16 x 32k HND decode (*)
# harness-l2order    hwtune bench attention: TRITON_ATTN prefill 8192 from empty and   Design: program order
#                    4096 on a 4096 prefix (the L2-friendly program order) (*)
# ab                 same-node A/B of kernels_bench against an earlier commit in       Design / Tried and
#                    ab_old/ (rounds alternated); see below                         rejected (A/B figures)
# experiment         python3 $EXPERIMENT $EXP_SECONDS $EXP_ARGS (an experiment script, Design / Tried and
#                    e.g. benchmarks/experiments/tq_long_context.py)               rejected (config searches)
# fi-cache           returns FlashInfer's JIT cache as $OUT/fi-cache.tgz
#
# (*) no committed script made the original runs; these are the same workloads, read from the records in
# benchmarks/results/kernels_harness_fp8_h100_2026-11-21.json and kernels_harness_prefill_l2order_h100_2026-11-21.json.
#
# Environment: BUDGET (seconds for the whole call, default 560), TESTS (a pytest -k expression), EXPERIMENT,
# EXP_SECONDS (default: what is left of BUDGET less 60 s), EXP_ARGS (e.g. variant names, or --ab).
# ab: before the device call, here:  mkdir -p ab_old && git archive <commit> hwtune benchmarks/kernels_bench.py |
# tar -x -C ab_old  (list ab_old/ in .git/info/exclude and name it in `carry`). SECTIONS (default prefill) picks
# kernels_bench sections; FI, if set (e.g. "--fi-decode fa2,fa2-tc"), adds FlashInfer to the last "new" round
# only (its JIT builds cost 40 s+); WIDTH (default 70) cuts the printed lines.
# Outputs go to $OUT (default /tmp/out): kernels_gpu_tests.txt, kernels_gpu_slow_tests.txt, kernels_<section>.json,
# h_*.json (harness records, printed by print_records.py), ab_{old,new}_<round>.json, <experiment>.txt.
set -u
usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; }
[ $# -gt 0 ] || { usage; exit 2; }
for section in "$@"; do
  case " tests tests-slow decode prefill page128 decode-prefill-fa3 turboquant memory harness harness-tma harness-fp8 harness-l2order ab experiment fi-cache " in *" $section "*) ;; *) echo "unknown section '$section'"; usage; exit 2 ;; esac
done
export FLASHINFER_WORKSPACE_BASE="$PWD/.fi-cache"
. benchmarks/device/setup.sh || exit 1
start=$(date +%s)
left() { echo $(( ${BUDGET:-560} - ($(date +%s) - start) )); }
kb() {  # kb TIMEOUT OUTFILE ARGS...: one kernels_bench run, results written after every section
  local t=$1 f=$2; shift 2
  timeout "$t" python3 benchmarks/kernels_bench.py "$@" --out "$OUT/$f" 2>&1 | grep -v "^$" | tail -30
}
H="--num-heads 32 --num-kv-heads 8 --head-size 128 --time-cap 1 --json"
harness() {  # harness NAME ARGS...: one `hwtune bench attention` run into $OUT/h_NAME.json
  local f="$OUT/h_$1.json"; shift
  timeout 150 python3 -m hwtune bench attention $H "$@" >> "$f" 2>>"$OUT/h_err.txt"
}
printed=0
print_harness() { python3 benchmarks/device/print_records.py "$OUT"; tail -3 "$OUT/h_err.txt" 2>/dev/null | cut -c1-300; }

for section in "$@"; do
  echo "== $section ($(left) s left)"
  case $section in
    tests)
      echo "-k '${TESTS:-}'" >> "$OUT/kernels_gpu_tests.txt"
      timeout 240 python3 -m pytest tests/kernels/test_gpu.py -m "gpu and not slow" -q -p no:cacheprovider -rf \
        -k "${TESTS:-}" >> "$OUT/kernels_gpu_tests.txt" 2>&1; tail -6 "$OUT/kernels_gpu_tests.txt" | cut -c1-400 ;;
    tests-slow)
      echo "-k '${TESTS:-}'" >> "$OUT/kernels_gpu_slow_tests.txt"
      timeout $(( $(left) - 10 )) python3 -m pytest tests/kernels/test_gpu.py -m slow -k "${TESTS:-}" -v \
        -p no:cacheprovider -rf >> "$OUT/kernels_gpu_slow_tests.txt" 2>&1
      grep -E "PASS|FAIL|passed|failed|Error" "$OUT/kernels_gpu_slow_tests.txt" | cut -c1-300 ;;
    decode)
      kb 150 kernels_decode.json --sections floors,decode --fi-decode fa2,fa2-tc ;;
    prefill)
      kb 150 kernels_prefill_page16.json --sections floors,prefill --fi-prefill none ;;
    page128)
      kb 330 kernels_prefill_page128.json --sections floors,prefill --page 128 --fi-prefill fa3 ;;
    decode-prefill-fa3)
      kb 330 kernels_decode_prefill_fa3.json --sections floors,decode,prefill --fi-decode fa2,fa2-tc --fi-prefill fa3 ;;
    turboquant)
      kb 200 kernels_turboquant.json --sections floors,prefill,turboquant,error --fi-decode fa2,fa2-tc --fi-prefill none ;;
    memory)
      kb 150 kernels_memory.json --sections memory ;;
    harness)
      harness ta_prefill --backend TRITON_ATTN -t auto --phase prefill --batch 1 --context 4096 --query-len 4096
      for L in NHD HND; do
        harness tq_$L --backend TURBOQUANT --kv-cache-dtype turboquant_4bit --kv-layout $L --phase decode --batch 16 --context 32768
        harness fi_$L --backend FLASHINFER -t fa2-tc --kv-layout $L --phase decode --batch 16 --context 32768
      done
      printed=1 ;;
    harness-tma)
      harness ta_prefill_p128 --backend TRITON_ATTN -t auto --phase prefill --batch 1 --context 4096 --query-len 4096 --block-size 128
      harness ta_prefill_p16 --backend TRITON_ATTN -t auto --phase prefill --batch 1 --context 4096 --query-len 4096
      printed=1 ;;
    harness-fp8)
      harness ta_fp8_HND --backend TRITON_ATTN -t auto --kv-cache-dtype fp8_e4m3 --kv-layout HND --phase decode --batch 16 --context 32768
      harness fi_fp8_HND --backend FLASHINFER -t fa2-tc --kv-cache-dtype fp8_e4m3 --kv-layout HND --phase decode --batch 16 --context 32768
      printed=1 ;;
    harness-l2order)
      harness ta_prefill_8192 --backend TRITON_ATTN -t auto --phase prefill --batch 1 --context 8192 --query-len 8192
      harness ta_prefill_4096_on_4096 --backend TRITON_ATTN -t auto --phase prefill --batch 1 --context 8192 --query-len 4096
      printed=1 ;;
    ab)
      [ -d ab_old/hwtune ] || { echo "ab_old/ is missing: see this script's header"; exit 2; }
      base=$PWD
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
      done ;;
    experiment)
      [ -n "${EXPERIMENT:-}" ] || { echo "experiment: set EXPERIMENT to a script path"; exit 2; }
      s=${EXP_SECONDS:-$(( $(left) - 60 ))}
      timeout $(( s + 40 )) python3 "$EXPERIMENT" "$s" ${EXP_ARGS:-} 2>&1 \
        | tee "$OUT/$(basename "$EXPERIMENT" .py).txt" | grep -v "^$" | tail -40 ;;
    fi-cache)
      tar czf "$OUT/fi-cache.tgz" .fi-cache 2>/dev/null; ls -la "$OUT" ;;
  esac
done
[ $printed = 1 ] && print_harness
exit 0
