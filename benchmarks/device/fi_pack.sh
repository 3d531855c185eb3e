#!/usr/bin/env bash
# Packs FlashInfer's JIT cache ($FLASHINFER_WORKSPACE_BASE) into $OUT/fi-cache.tar.xz, for the next device call to
# carry: copy it here into .fi-pack/ (ignored) and name .fi-pack in `carry`; setup.sh unpacks it into the workspace,
# so FlashInfer's kernels are not compiled again (about 200 s a call for the attention backends' tactics). Compressed
# because the raw cache (19-20 MB on 2026-11-28) does not fit beside .whl and .vllm in the 64 MiB a call carries.
# A pack over 16 MiB, the largest file a call returns, is removed with a message. Unpack it at the same
# $FLASHINFER_WORKSPACE_BASE it was packed from (regret.sh: $PWD/.fi-cache): ninja reruns a build whose command, paths
# included, changed. Checked on an H200 (2026-11-28, benchmarks/README.md): fa3's first call after an unpack compiled
# nothing (0.1 s against 87.6).
#
#   bash benchmarks/device/fi_pack.sh        (after the work, in the same command; regret.sh does it with FI_PACK=1)
set -u
src=${FLASHINFER_WORKSPACE_BASE:-/tmp/fi-ws} out=${OUT:-/tmp/out} limit=16777216
[ -d "$src" ] || { echo "fi_pack: no JIT cache at $src"; exit 0; }
XZ_OPT="-6 -T0" tar -C "$src" -cJf "$out/fi-cache.tar.xz" . || { echo "fi_pack: tar failed"; exit 1; }
size=$(stat -c %s "$out/fi-cache.tar.xz")
if [ "$size" -gt "$limit" ]; then
  rm -f "$out/fi-cache.tar.xz"; echo "fi_pack: $size bytes packed, over the $limit a call returns: not kept"
else
  echo "fi_pack: $(du -sh "$src" | cut -f1) of JIT cache in $out/fi-cache.tar.xz ($size bytes)"
fi
