#!/usr/bin/env bash
# Re-score committed regret stores with the code of the working tree, on any machine (no GPU): each model's train
# and oracle JSON Lines are imported into fresh SQLite stores and scored as on the machine that measured them
# (regret.py --score-only --as-stored). Prints each model's regret table; regret.json per model lands in OUT.
#
#   bash benchmarks/regret_rescore.sh RESULTS_DIR OUT CONFIG:TP [CONFIG:TP ...]
#
# RESULTS_DIR holds <model>-tp<TP>_train.jsonl and <model>-tp<TP>_oracle.jsonl (as in
# benchmarks/results/regret_h100_2026-11-25_ae014e1/); <model> is the config's file name without .json.
# Environment: KV_LAYOUT (regret.py --kv-layout, default NHD: the layout the stores were tuned and scored in),
# KV_CACHE_DTYPE (regret.py --kv-cache-dtype, default auto; fp8 reads <model>-tp<TP>-kvfp8_e4m3_*.jsonl), BLOCK_SIZE
# (regret.py --block-size; reads <model>-tp<TP>[-kv<dtype>]-bs<size>_*.jsonl).
set -eu
[ $# -ge 3 ] || { awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 2; }
src=$1 out=$2; shift 2
for model in "$@"; do
  cfg="${model%%:*}"; tp="${model##*:}"; [ "$tp" = "$model" ] && tp=1
  name="$(basename "$cfg" .json)-tp$tp"
  kv="${KV_CACHE_DTYPE:-auto}"
  if [ "$kv" != auto ]; then
    name="$name-kv$(python3 -c 'import sys; from hwtune.core.types import normalize_kv_cache_dtype as n; print(n(sys.argv[1]))' "$kv")"
  fi
  [ -n "${BLOCK_SIZE:-}" ] && name="$name-bs$BLOCK_SIZE"
  mkdir -p "$out/$name"
  for k in train oracle; do
    rm -f "$out/$name/$k.db"
    python3 -m hwtune db import "$src/${name}_$k.jsonl" --db "sqlite:///$out/$name/$k.db" >/dev/null
  done
  python3 benchmarks/regret.py --out "$out" --model "$cfg:$tp" --score-only --as-stored --device h100 --kv-layout "${KV_LAYOUT:-NHD}" --kv-cache-dtype "$kv" \
    ${BLOCK_SIZE:+--block-size "$BLOCK_SIZE"} 2>&1 | tail -6
done
