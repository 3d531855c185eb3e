#!/usr/bin/env bash
# The attention probes (hwtune's measuring harness) and measured selection on one GPU. Device kind:
# nvidia-h100-x1 (docs/probes.md and docs/tuning.md report an NVIDIA H100 80GB HBM3). Carry .whl and .fi-cache.
# Whole plans are run by tune.sh (docs/probes.md "Measured on an H100").
#
#   bash benchmarks/device/probes.sh SECTION [SECTION ...]       sections run in the order given
#
# section   what it runs                                                       feeds
# faults    tests/probes/test_faults.py -m gpu (an illegal memory access is      docs/probes.md "Isolation"
#           followed by a correct measurement)
# served    tests/probes/test_served_models.py -m gpu, one line per test into    docs/probes.md "Wrong answers
#           $OUT/served_models.log as it goes (K=pytest -k filter; LIMIT s,       and crashes found"
#           default 540: JIT of every kernel variant takes minutes)
# cudnn     hwtune bench attention, FLASHINFER cudnn (needs the cuDNN frontend    docs/probes.md "Wrong answers
#           wheel in .whl): prefill shapes cuDNN declined on 2026-11-25 (batch B   and crashes found"
#           one page shorter), Llama-3.3-70B TP 8 and Qwen2.5-7B; and
#           benchmarks/experiments/sdpa_cudnn_decode_mask.py (SDPA cudnn: mask or
#           strides) into $OUT/sdpa_cudnn_decode_mask.txt
# peer      benchmarks/harness_vs_flashinfer.py: hwtune's timing of FlashInfer    docs/probes.md "Agreement
#           calls against flashinfer.testing.bench_gpu_time                      with a peer"
# bench-fi  hwtune bench attention, FLASHINFER (every tactic): decode 64 x 2048,   first-contact check, no figure
#           prefill 2048, mixed 8 x 4096 with 512-token chunks
# bench     hwtune bench attention, TRITON_ATTN and FLASHINFER: decode 64 x 8192,  first-contact check, no figure
#           decode 16 x 32768, prefill 4096
# gaps      hwtune tune with benchmarks/plans/probes_h100_gaps.toml into            docs/probes.md (FLEX_ATTENTION
#           $OUT/gaps.db, then `hwtune show` and its JSON Lines export             HND / spec / DCP, SDPA flash)
# latency   benchmarks/regret.py --steps score over stores rebuilt from the        docs/tuning.md "Latency of
#           committed tune exports: warm and cold selection latency on this host   selection"
# regret    benchmarks/regret.py, every step (quick tune, default tune, oracle      docs/tuning.md "Evidence"
#           set, score) into $OUT/regret, then both stores exported as JSON Lines   (*)
#           (the steps took 93 + 160 + 68 s on the H100, JIT included)
#
# (*) no device script ran it before; this is regret.py's documented use plus `hwtune db export`, which wrote
# the committed tune_{train,oracle}_h100_2026-11-21.jsonl (their header line says format hwtune-measurements).
#
# Outputs in $OUT (default /tmp/out): served_models.log, harness_vs_flashinfer.json, h_*.json (printed by print_records.py),
# gaps.db + probes_gaps.jsonl, selection_latency.json, regret/ (regret.json, *.db) + tune_{train,oracle}.jsonl.
set -u
usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; }
[ $# -gt 0 ] || { usage; exit 2; }
for section in "$@"; do
  case " faults served cudnn peer bench-fi bench gaps latency regret " in *" $section "*) ;; *) echo "unknown section '$section'"; usage; exit 2 ;; esac
done
export FLASHINFER_WORKSPACE_BASE="$PWD/.fi-cache"
. benchmarks/device/setup.sh || exit 1
H="--num-heads 32 --num-kv-heads 8 --head-size 128 --time-cap 1 --json"
harness() {  # harness NAME ARGS...: one `hwtune bench attention` run into $OUT/h_NAME.json
  local f="$OUT/h_$1.json"; shift
  timeout 200 python3 -m hwtune bench attention $H "$@" >> "$f" 2>>"$OUT/h_err.txt"
}
printed=0

for section in "$@"; do
  echo "== $section"
  case $section in
    faults)
      python3 -m pytest -q -m gpu tests/probes/test_faults.py -p no:cacheprovider 2>&1 | tail -5 ;;
    served)
      timeout "${LIMIT:-540}" python3 -m pytest -v -m gpu tests/probes/test_served_models.py -p no:cacheprovider \
        ${K:+-k "$K"} 2>&1 | tee "$OUT/served_models.log" | grep -E "PASSED|FAILED|SKIPPED|AssertionError" | cut -c1-600 ;;
    cudnn)
      for m in llama-3.3-70b-instruct:8 qwen2.5-7b-instruct:1; do
        for shape in "--context 1596 --query-len 96" "--context 4500 --query-len 3000" "--context 219 --query-len 128"; do
          timeout 120 python3 -m hwtune bench attention -b FLASHINFER -t cudnn --phase prefill --batch 1 $shape \
            -m "tests/data/models/${m%%:*}.json" --tp "${m##*:}" --time-cap 0.3 2>&1 | grep -E "FLASHINFER|rror" | cut -c1-300
        done
      done
      timeout 90 python3 benchmarks/experiments/sdpa_cudnn_decode_mask.py 2>&1 | tee "$OUT/sdpa_cudnn_decode_mask.txt" ;;
    peer)
      timeout 120 python3 benchmarks/harness_vs_flashinfer.py --out "$OUT/harness_vs_flashinfer.json" 2>&1 \
        | grep -v '^{' | tail -12 ;;
    bench-fi)
      harness fi_decode_b64_ctx2048 --backend FLASHINFER --phase decode --batch 64 --context 2048
      harness fi_prefill_b1_ctx2048 --backend FLASHINFER --phase prefill --batch 1 --context 2048
      harness fi_mixed_b8_ctx4096_q512 --backend FLASHINFER --phase mixed --batch 8 --context 4096 --query-len 512
      printed=1 ;;
    bench)
      for b in TRITON_ATTN FLASHINFER; do
        harness "${b}_decode_b64_ctx8192" --backend $b --phase decode --batch 64 --context 8192
        harness "${b}_decode_b16_ctx32768" --backend $b --phase decode --batch 16 --context 32768
        harness "${b}_prefill_b1_ctx4096" --backend $b --phase prefill --batch 1 --context 4096
      done
      printed=1 ;;
    gaps)
      DB="$OUT/gaps.db"
      timeout -s INT 200 python3 -m hwtune tune --db "sqlite:///$DB" --plan benchmarks/plans/probes_h100_gaps.toml \
        --kinds attention --time-cap 0.6 2>&1 | grep -v "━" | tail -25
      python3 -m hwtune show --db "sqlite:///$DB" 2>&1 | tail -20
      python3 -m hwtune db export "$OUT/probes_gaps.jsonl" --db "sqlite:///$DB" 2>&1 | tail -2 ;;
    latency)
      R=/tmp/regret/llama-3.1-8b-tp1; mkdir -p $R  # those stores were tuned with kv_layout auto (measured NHD)
      python3 -m hwtune db import benchmarks/results/tune_train_h100_2026-11-21.jsonl --db "sqlite:///$R/train.db" | tail -1
      python3 -m hwtune db import benchmarks/results/tune_oracle_h100_2026-11-21.jsonl --db "sqlite:///$R/oracle.db" | tail -1
      timeout 120 python3 benchmarks/regret.py --out /tmp/regret --kv-layout auto --score-only --steps score,latency 2>&1 | tail -8
      cp $R/regret.json "$OUT/selection_latency.json" ;;
    regret)
      R="$OUT/regret/llama-3.1-8b-tp1"
      timeout 560 python3 benchmarks/regret.py --out "$OUT/regret" 2>&1 | tail -12
      python3 -m hwtune db export "$OUT/tune_train.jsonl" --db "sqlite:///$R/train.db" 2>&1 | tail -1
      python3 -m hwtune db export "$OUT/tune_oracle.jsonl" --db "sqlite:///$R/oracle.db" 2>&1 | tail -1 ;;
  esac
done
if [ $printed = 1 ]; then
  python3 benchmarks/device/print_records.py "$OUT"; tail -3 "$OUT/h_err.txt" 2>/dev/null | cut -c1-300
fi
exit 0
