#!/usr/bin/env bash
# vLLM's own attention kernels for the offline Hopper device machines, small enough to carry (about 13 MB): from the
# vllm wheel on PyPI, its Python sources, the FlashAttention-3 extension (vllm_flash_attn/_vllm_fa3_C, FLASH_ATTN's
# fa3 tactic) and FlashMLA (_flashmla_C, _flashmla_extension_C: FLASHMLA), packed as .vllm/vllm-VERSION-hopper-attn.tar.xz.
# Everything else (the FA2 extension, vLLM's _C ops, MoE kernels, DeepGEMM, CUTLASS headers) is left out: nothing in
# hwtune's candidates calls it, and the whole wheel (336 MB for 0.33.0) is over the 64 MiB a device call carries.
# The default version, 0.25.1, is the newest vLLM built for torch 2.11 and CUDA 13 (Requires-Dist torch==2.11.0, its
# extensions link libtorch and libcudart.so.13), the device image's torch; a newer vLLM's extensions need its torch.
# benchmarks/device/setup.sh unpacks the bundle next to the carried wheels when .vllm/ holds one (carry .vllm).
#
#   bash benchmarks/device/vllm_bundle.sh [VERSION]        (here, with a network; about 2 minutes, mostly xz)
set -euo pipefail
version=${1:-0.25.1}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$work" "vllm==$version"
mkdir "$work/x"
unzip -q "$work"/vllm-*.whl -d "$work/x" 'vllm/*.py' "vllm-$version.dist-info/*" \
  'vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so' 'vllm/_flashmla_C.abi3.so' 'vllm/_flashmla_extension_C.abi3.so'
# vllm/platforms/cuda.py imports vLLM's own ops (_C_stable_libtorch, 76 MB; 54 MB compressed) only to register them,
# and neither kernel here calls them: an empty module stands in (a call into torch.ops._C fails, it never runs
# something else), so that `import vllm` works on a CUDA machine.
cat > "$work/x/vllm/_C_stable_libtorch.py" <<'PY'
"""Stand-in of hwtune's device bundle (benchmarks/device/vllm_bundle.sh) for vLLM's own ops, left out of it."""
PY
mkdir -p .vllm
tar -C "$work/x" -cf - vllm "vllm-$version.dist-info" | xz -T0 -9 > ".vllm/vllm-$version-hopper-attn.tar.xz"
ls -la .vllm
