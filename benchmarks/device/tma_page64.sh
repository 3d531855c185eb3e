#!/usr/bin/env bash
# H100: 64-token pages, gathers (auto config, 128-token tiles over two pages) vs TMA with 64-token tiles.
set -u
. benchmarks/device/setup.sh || exit 1
V="pkg/page64,pkg/page64/n64/tma/st2,pkg/page64/n64/tma/st3,pkg/page64/n64/tma/st4"
timeout 200 python3 benchmarks/experiments/prefill_tma.py 170 "$V" 2>&1 | tee "$OUT/prefill_tma_page64.txt" | grep -v "^$"
