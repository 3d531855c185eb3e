"""Which decode inputs torch's cuDNN SDPA kernel gets wrong (issue 17). Every H100 store so far has TORCH_SDPA cudnn
decode as a wrong answer at batch > 1 (relative L2 1e4-1e5; 2026-11-21 probes: 17 of 20 decode shapes, bf16, GQA 4
and MHA; 2026-11-25 served-models gate: ChatGLM2-6B, fp16, GQA 16, batch 2) and right at batch 1. The TORCH_SDPA
runner hands SDPA K/V as views of the gathered pages sliced to the longest context, so their batch stride is the
pages' (not length x heads x dim). This compares SDPBackend.CUDNN_ATTENTION with float32 math over dtype, a padding
mask, and K/V packed or strided like the runner's; prints one line per case (GPU only; not yet run)."""

import itertools

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PAGE = 16


def _kv(length: int, heads: int, dim: int, dtype: torch.dtype, strided: bool, g: torch.Generator) -> torch.Tensor:
    """[2, heads, length, dim]: packed, or a view of [2, pages * PAGE, heads, dim] sliced to ``length`` (as run)."""
    slots = -(-length // PAGE) * PAGE + PAGE  # one spare page, as a longer request's table would leave
    full = torch.randn(2, slots, heads, dim, device="cuda", dtype=dtype, generator=g)
    view = full[:, :length].transpose(1, 2)
    return view if strided else view.contiguous()


def case(dtype: torch.dtype, masked: bool, strided: bool, length: int, heads: int = 32, dim: int = 128) -> str:
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 1, heads, dim, device="cuda", dtype=dtype, generator=g).transpose(1, 2)
    k, v = (_kv(length, heads, dim, dtype, strided, g) for _ in range(2))
    mask = None
    if masked:  # request 1 sees only its first 29 keys
        mask = torch.ones(2, 1, 1, length, dtype=torch.bool, device="cuda")
        mask[1, ..., 29:] = False
    with sdpa_kernel([SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
    try:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).float()
    except RuntimeError as exc:
        return f"refused: {str(exc).splitlines()[0][:100]}"
    err = [((out[b] - ref[b]).norm() / ref[b].norm()).item() for b in range(2)]
    return f"rel_l2 request0 {err[0]:.2e} request1 {err[1]:.2e}"


if __name__ == "__main__":
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name())
    grid = itertools.product((torch.float16, torch.bfloat16), (False, True), (False, True), (48, 512))
    for dtype, masked, strided, length in grid:
        label = f"{str(dtype)[6:]:9} mask={masked!s:5} strided={strided!s:5} keys={length:4}"
        print(label, case(dtype, masked, strided, length), flush=True)
