#!/usr/bin/env bash
# H100, after the prefill changes of issue 5 (KV head on the fastest grid axis, row-only masks, compile-time
# loop start when unsplit): kernels_bench floors/decode/prefill beside FlashInfer (decode fa2 / fa2-tc,
# prefill fa3) in one run, then the probes' harness on 4096-token prefill and on 16 x 32k decode for
# TURBOQUANT 4-bit and FlashInfer (both layouts), to check that decode did not move.
set -u
export FLASHINFER_WORKSPACE_BASE="$PWD/.fi-cache"
. benchmarks/device/setup.sh || exit 1
timeout 330 python3 benchmarks/kernels_bench.py --sections floors,decode,prefill --fi-decode fa2,fa2-tc \
  --fi-prefill fa3 --out "$OUT/kernels_prefill_final.json" 2>&1 | grep -v "^$" | tail -30
H="--num-heads 32 --num-kv-heads 8 --head-size 128 --time-cap 1 --json"
run() { f="$OUT/h_$1.json"; shift; timeout 120 python3 -m hwtune bench attention $H "$@" >> "$f" 2>>"$OUT/h_err.txt"; }
run ta_prefill --backend TRITON_ATTN -t auto --phase prefill --batch 1 --context 4096 --query-len 4096
for L in NHD HND; do
  run tq_$L --backend TURBOQUANT --kv-cache-dtype turboquant_4bit --kv-layout $L --phase decode --batch 16 --context 32768
  run fi_$L --backend FLASHINFER -t fa2-tc --kv-layout $L --phase decode --batch 16 --context 32768
done
python3 benchmarks/device/print_records.py "$OUT"
tail -3 "$OUT/h_err.txt" 2>/dev/null | cut -c1-300
