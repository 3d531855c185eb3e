#!/usr/bin/env bash
# Regret of hwtune's selection on other models (docs/regret.md): per model, the default plan tuned
# into train.db, the off-grid oracle into oracle.db, both scored, and both stores exported as JSON Lines. Device
# kind: nvidia-h100-x1 or nvidia-h200. Carry .whl, .fi-pack (FlashInfer's kernels packed by an earlier call: fi_pack.sh)
# and .vllm for FLASH_ATTN's fa3 and FLASHMLA (vllm_bundle.sh). One model after another: runs side by side compile the
# same kernels at once (benchmarks/README.md).
#
#   [BACKENDS=FLASHINFER,HWTUNE_TRITON_ATTN:auto] TRAIN_LIMIT=300 ORACLE_LIMIT=200 bash benchmarks/device/regret.sh \
#       CONFIG:TP [CONFIG:TP ...]
#
# Environment: BACKENDS (regret.py --backends; default its own), KV_CACHE_DTYPE (regret.py --kv-cache-dtype, default
# auto; fp8 names the outputs <model>-tp<TP>-kvfp8_e4m3 as regret.py does), TRAIN_LIMIT and ORACLE_LIMIT seconds per model for
# the default tune and the oracle (defaults 320 and 220; a step past its limit is interrupted, what it stored is
# scored, and an interrupted default tune still leaves the oracle its own time), CAP seconds of timing per oracle
# candidate (default 0.3), BISECT_FACTOR (regret.py --bisect-factor: the default tune's bisection factor, an experiment),
# BISECT_TACTICS=1 (regret.py --bisect-tactics: also bisect a winning backend's own tactic crossovers, an experiment),
# BLOCK_SIZE (regret.py --block-size: the KV block size of every step, e.g. 64 for FLASHMLA; names the outputs -bs<size>),
# FI_PACK=1 (at the end, FlashInfer's JIT cache packed into $OUT/fi-cache.tar.xz by fi_pack.sh, for .fi-pack).
# Outputs in $OUT/regret/<model>-tp<TP>[-kv<dtype>][-bs<size>]/: regret.json; in $OUT:
# regret_<model>-tp<TP>[-kv<dtype>][-bs<size>]_{train,oracle}.jsonl.
set -u
[ $# -gt 0 ] || { awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 2; }
TRAIN_LIMIT=${TRAIN_LIMIT:-320} ORACLE_LIMIT=${ORACLE_LIMIT:-220}
export FLASHINFER_WORKSPACE_BASE="$PWD/.fi-cache"
. benchmarks/device/setup.sh || exit 1
for model in "$@"; do
  cfg="${model%%:*}"; tp="${model##*:}"; [ "$tp" = "$model" ] && tp=1
  name="$(basename "$cfg" .json)-tp$tp"
  kv="${KV_CACHE_DTYPE:-auto}"
  if [ "$kv" != auto ]; then
    name="$name-kv$(python3 -c 'import sys; from hwtune.core.types import normalize_kv_cache_dtype as n; print(n(sys.argv[1]))' "$kv")"
  fi
  [ -n "${BLOCK_SIZE:-}" ] && name="$name-bs$BLOCK_SIZE"
  R="$OUT/regret/$name"
  echo "== $name"
  for step in default oracle; do
    limit=$TRAIN_LIMIT; [ $step = oracle ] && limit=$ORACLE_LIMIT
    timeout -s INT "$limit" python3 benchmarks/regret.py --out "$OUT/regret" --model "$cfg:$tp" \
      --steps $step --oracle-time-cap "${CAP:-0.3}" ${BACKENDS:+--backends "$BACKENDS"} --kv-cache-dtype "$kv" \
      ${BISECT_FACTOR:+--bisect-factor "$BISECT_FACTOR"} ${BLOCK_SIZE:+--block-size "$BLOCK_SIZE"} $([ "${BISECT_TACTICS:-0}" = 1 ] && echo --bisect-tactics) 2>&1 | grep -v "━" | tail -4
  done
  python3 benchmarks/regret.py --out "$OUT/regret" --model "$cfg:$tp" --score-only --kv-cache-dtype "$kv" \
    ${BLOCK_SIZE:+--block-size "$BLOCK_SIZE"} 2>&1 | tail -6
  for k in train oracle; do
    [ -f "$R/$k.db" ] && python3 -m hwtune db export "$OUT/regret_${name}_$k.jsonl" --db "sqlite:///$R/$k.db" 2>&1 | tail -1
    rm -f "$R/$k.db" "$R/$k.db-wal" "$R/$k.db-shm"  # the JSON Lines export is what comes back
  done
done
[ "${FI_PACK:-0}" = 1 ] && bash benchmarks/device/fi_pack.sh
exit 0
