#!/usr/bin/env bash
# MoE all2all candidates on one multi-GPU host. Device kind: nvidia-h200-x4 (EP 2 and EP 4 on 4 x H200, as in
# docs/all2all.md "Measured on H200"); one-sided-tokens needs only 2 GPUs (nvidia-h200-x2). Carry .whl.
#
#   bash benchmarks/device/all2all.sh SECTION [SECTION ...]      sections run in the order given
#
# section           what it runs                                                  feeds docs/all2all.md
# tests             tests/probes/all2all/test_gpu.py (GPU tests of the harness)      Measured on H200: "Not
#                                                                                  measured, or not correct"
# grid              benchmarks/all2all_grid.py: the grid rows, most important first,  Measured on H200: the
#                   resuming from the committed results (copied into $OUT) and saved   fastest-candidate table
#                   after every trial, so a command killed at its limit loses at most  and what the grid shows
#                   one trial; then the report
# report            benchmarks/all2all_grid.py --report (tables only; runs on CPU too) same table
# one-sided-tokens  hwtune bench all2all: flashinfer_nvlink_one_sided at EP 2 over     Measured on H200: the
#                   odd and even tokens per rank (*)                                 EP 2 odd-token failure
#
# (*) no committed script made the original run; this is the same sweep, read from the records in
# benchmarks/results/all2all_one_sided_tokens_h200x2_2026-11-21.json (every flag exists in
# `hwtune bench all2all --help`; the time cap and timeout of that run were not recorded, so defaults apply).
#
# Environment: BUDGET (seconds for the grid section, default 540). Outputs in $OUT (default /tmp/out):
# all2all_grid_h200.json (the grid, committed records included), all2all_one_sided_tokens.json.
set -u
usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; }
[ $# -gt 0 ] || { usage; exit 2; }
for section in "$@"; do
  case " tests grid report one-sided-tokens " in *" $section "*) ;; *) echo "unknown section '$section'"; usage; exit 2 ;; esac
done
. benchmarks/device/setup.sh || exit 1
J="$OUT/all2all_grid_h200.json"
start=$(date +%s)
left() { echo $(( ${BUDGET:-540} - ($(date +%s) - start) )); }
G="python3 benchmarks/all2all_grid.py --out $J --tokens 1 16 128 1024 8192"
step() { local l; l=$(left); [ "$l" -gt 30 ] || { echo "skip (budget): $*"; return; }
  echo "== $* (${l}s left)"; timeout "$l" $G "$@" 2>&1 | grep -v "^\s*$" | tail -12; }

for section in "$@"; do
  case $section in
    tests)
      timeout 150 python3 -m pytest tests/probes/all2all/test_gpu.py -q -rs -p no:cacheprovider 2>&1 | tail -6 ;;
    grid)
      [ -f "$J" ] || cp benchmarks/results/all2all_grid_h200_2026-11-21.json "$J"
      step --ep 4 --hidden 2048 --quant bf16 fp8 --topk 8 --routing uniform --timeout 240
      step --ep 4 --hidden 7168 --quant fp8 --topk 8 --routing uniform --timeout 180 --retry-failed
      step --ep 2 --hidden 2048 --quant fp8 --topk 8 --routing uniform --timeout 240
      step --ep 2 4 --hidden 7168 --quant bf16 --topk 8 --routing skewed --timeout 240 \
        --backends naive allgather_reducescatter nccl_alltoallv flashinfer_nvlink_one_sided flashinfer_nvlink_two_sided
      step --ep 2 4 --hidden 7168 --quant bf16 --topk 2 --routing uniform --timeout 240 \
        --backends naive allgather_reducescatter nccl_alltoallv flashinfer_nvlink_one_sided flashinfer_nvlink_two_sided
      python3 benchmarks/all2all_grid.py --out "$J" --report 2>&1 | tail -5 ;;
    report)
      [ -f "$J" ] || J=benchmarks/results/all2all_grid_h200_2026-11-21.json
      python3 benchmarks/all2all_grid.py --out "$J" --report ;;
    one-sided-tokens)
      timeout 500 python3 -m hwtune bench all2all -b flashinfer_nvlink_one_sided -n 2 --hidden-size 2048 --topk 4 \
        --num-experts 16 --quant-dtype bf16 --explore -t 2 -t 3 -t 4 -t 5 -t 6 -t 8 -t 12 -t 17 -t 24 --json \
        > "$OUT/all2all_one_sided_tokens.json" 2> "$OUT/all2all_one_sided_tokens.err"
      python3 -c "import json,sys; [print(r['workload']['tokens_per_rank'], r['status'], (r['stats'] or {}).get('median_us'), r['message'][:120]) for r in json.load(open(sys.argv[1]))]" \
        "$OUT/all2all_one_sided_tokens.json" || tail -5 "$OUT/all2all_one_sided_tokens.err" ;;
  esac
done
