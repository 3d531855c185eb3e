# Sourced first by every device script (kernels.sh, all2all.sh, probes.sh, tune.sh); feeds no figure itself.
# Installs the carried wheels in .whl/ (flashinfer, sqlalchemy, alembic, platformdirs: the device machines
# have no network) into /tmp/hwtune-site, with vLLM's attention kernels where .vllm/ holds a bundle (vllm_bundle.sh;
# FLASH_ATTN fa3 and FLASHMLA), puts that dir and the repository on PYTHONPATH, points FlashInfer's JIT
# cache at $FLASHINFER_WORKSPACE_BASE (default /tmp/fi-ws; filled from .fi-pack/*.tar.xz where carried: fi_pack.sh), turns NVLink multicast off (NCCL NVLS, torch
# symmetric memory, NVSHMEM), creates $OUT (default /tmp/out) and prints the GPU (name, driver, memory, max SM
# clock) and the torch / triton / flashinfer versions: the provenance a result file needs.
# One fixed directory, its files dated 2000-01-01, installed once per machine (scripts run side by side share it,
# under a lock): FlashInfer's JIT builds with ninja, which rebuilds a packed kernel when its compile command (the
# include paths into this directory) differs or a header is newer than the object; with a fresh temp dir each call, as
# before 2026-11-28, every call compiled again, a pack unpacked or not.
t=/tmp/hwtune-site
stamp="$t/.installed-$(cat .whl/*.whl .vllm/*.tar.xz 2>/dev/null | md5sum | cut -c1-12)"
(
  flock 9 || exit 1
  [ -f "$stamp" ] && exit 0
  rm -rf "$t" && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$t" .whl/*.whl || exit 1
  for b in .vllm/*.tar.xz; do [ -f "$b" ] && { tar -C "$t" -xJf "$b" || exit 1; }; done
  find "$t" -exec touch -h -d 2000-01-01 {} + && touch "$stamp"
) 9>/tmp/hwtune-site.lock || return 1
export PYTHONPATH="$t:$PWD"
export FLASHINFER_WORKSPACE_BASE="${FLASHINFER_WORKSPACE_BASE:-/tmp/fi-ws}"
for p in .fi-pack/*.tar.xz; do  # a JIT cache packed by fi_pack.sh in an earlier call, carried as .fi-pack; unpacked once
  [ -f "$p" ] || continue       # per pack's content (stamp and lock outside the cache, which fi_pack.sh packs whole)
  mkdir -p "$FLASHINFER_WORKSPACE_BASE" || return 1
  flock /tmp/fi-pack.lock sh -c '[ -f "$1" ] || { tar -C "$2" -xJf "$3" && touch "$1"; }' - \
    "/tmp/fi-pack-unpacked-$(md5sum < "$p" | cut -c1-12)" "$FLASHINFER_WORKSPACE_BASE" "$p" || return 1
done
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton, flashinfer; import importlib.metadata as m, importlib.util as u; v = m.version('vllm') if u.find_spec('vllm') else None; print('torch', torch.__version__, 'triton', triton.__version__, 'flashinfer', flashinfer.__version__, 'vllm', v, 'gpus', torch.cuda.device_count())"
