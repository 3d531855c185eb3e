#!/usr/bin/env bash
# All2all on a 4-GPU H200 host: the GPU tests of the harness, then the grid cells docs/all2all.md still
# lacks, most important first. Resumes from the committed results (copied into $OUT) and saves after
# every trial, so a command killed at its time limit loses at most one trial.
set -u
. benchmarks/device/setup.sh || exit 1
J="$OUT/a2a_h200.json"
cp benchmarks/results/all2all_h200_2026-11-21.json "$J"
start=$(date +%s)
left() { echo $(( ${BUDGET:-540} - ($(date +%s) - start) )); }
timeout 150 python3 -m pytest tests/probes/all2all/test_gpu.py -q -rs -p no:cacheprovider 2>&1 | tail -6
G="python3 benchmarks/all2all_grid.py --out $J --tokens 1 16 128 1024 8192"
step() { local l; l=$(left); [ "$l" -gt 30 ] || { echo "skip (budget): $*"; return; }
  echo "== $* (${l}s left)"; timeout "$l" $G "$@" 2>&1 | grep -v "^\s*$" | tail -12; }
step --ep 4 --hidden 2048 --quant bf16 fp8 --topk 8 --routing uniform --timeout 240
step --ep 4 --hidden 7168 --quant fp8 --topk 8 --routing uniform --timeout 180 --retry-failed
step --ep 2 --hidden 2048 --quant fp8 --topk 8 --routing uniform --timeout 240
step --ep 2 4 --hidden 7168 --quant bf16 --topk 8 --routing skewed --timeout 240 \
  --backends naive allgather_reducescatter nccl_alltoallv flashinfer_nvlink_one_sided flashinfer_nvlink_two_sided
step --ep 2 4 --hidden 7168 --quant bf16 --topk 2 --routing uniform --timeout 240 \
  --backends naive allgather_reducescatter nccl_alltoallv flashinfer_nvlink_one_sided flashinfer_nvlink_two_sided
python3 benchmarks/all2all_grid.py --out "$J" --report 2>&1 | tail -5
