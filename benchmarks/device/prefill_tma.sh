#!/usr/bin/env bash
# H100: where prefill loses time, page gathers vs TMA tile loads (benchmarks/experiments/prefill_tma.py).
# $1: seconds for the experiment (default 420); $2: variants (default all).
set -u
. benchmarks/device/setup.sh || exit 1
timeout $(( ${1:-420} + 60 )) python3 benchmarks/experiments/prefill_tma.py "${1:-420}" "${2:-}" 2>&1 \
  | tee "$OUT/prefill_tma.txt" | grep -v "^$"
