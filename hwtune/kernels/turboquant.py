"""TURBOQUANT: a compressed paged KV cache (randomised Hadamard rotation + per-vector scalar codes) and
attention that works on the codes.

Why this shape (after TurboQuant, Zandieh et al. 2025): rotating each K and V vector by a fixed random
orthogonal transform per KV head makes its coordinates near-Gaussian even when the raw keys have outlier
channels, so a plain asymmetric min-max quantizer per (token, head) with 4 or 8 bits keeps most of the
signal. Attention rotates the *query* by the same transform (dot products are unchanged), accumulates
``p @ V'`` in the rotated basis and un-rotates only the output: the cache is never de-rotated or expanded
to floats. (The paper adds a 1-bit QJL residual for unbiased inner products; hwtune keeps the scalar
quantizer only: simpler, and the measured error is reported in docs/kernels.md.)

Memory per token and KV head: ``2 * (D * bits / 8 + 4)`` bytes (codes, float16 scale and zero, for K and
V) against ``2 * 2 * D`` in bf16: 3.76x smaller at 4 bits and D=128, 1.94x at 8 bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hwtune.kernels import hadamard
from hwtune.kernels._common import (
    LOG2E,
    check_query_io,
    check_runnable,
    l2_bytes,
    num_sms,
    plan_launch,
)
from hwtune.kernels.configs import TritonAttnConfig, cdiv, turboquant_config
from hwtune.kernels.split_kv import merge_splits, split_buffers
from hwtune.kernels.turboquant_kernels import tq_attn_kernel, tq_write_kernel

HEAD_SIZES = (64, 128, 256)
BITS = (4, 8)
KV_CACHE_DTYPES = {"turboquant_4bit": 4, "turboquant_8bit": 8}


@dataclass
class TurboQuantCache:
    """Paged quantized KV cache. ``layout`` "NHD": codes [blocks, page, kv_heads, bytes], scales/zeros
    [blocks, page, kv_heads]; "HND": [blocks, kv_heads, page, ...] (each head's page contiguous).
    ``rotation``: float32 [kv_heads, D] of +-1, the random signs of each head's Hadamard transform."""

    k_codes: torch.Tensor
    v_codes: torch.Tensor
    k_scales: torch.Tensor
    v_scales: torch.Tensor
    k_zeros: torch.Tensor
    v_zeros: torch.Tensor
    rotation: torch.Tensor
    bits: int
    block_size: int
    num_kv_heads: int
    head_size: int
    layout: str = "NHD"
    seed: int = 0
    hadamard: torch.Tensor | None = None  # bf16 [D/2, D/2] of +-1 read by the attention kernel

    def hadamard_half(self) -> torch.Tensor:
        """The half-size Sylvester matrix the attention kernel loads (made by allocate_cache, i.e. before
        any graph capture; created here only for a cache built by hand)."""
        if self.hadamard is None:
            self.hadamard = hadamard.hadamard_matrix(
                self.head_size // 2, dtype=torch.bfloat16, device=self.k_codes.device
            )
        return self.hadamard

    def code_strides(self) -> tuple[int, int, int]:
        """(block, position-in-page, head) strides of the code tensors (same for K and V)."""
        c = self.k_codes
        return (
            (c.stride(0), c.stride(1), c.stride(2)) if self.layout == "NHD" else (c.stride(0), c.stride(2), c.stride(1))
        )

    def scale_strides(self) -> tuple[int, int, int]:
        """(block, position-in-page, head) strides of the scale/zero tensors, whatever the layout (as
        ``code_strides``)."""
        s = self.k_scales
        return (
            (s.stride(0), s.stride(1), s.stride(2)) if self.layout == "NHD" else (s.stride(0), s.stride(2), s.stride(1))
        )

    def nbytes(self) -> int:
        """Bytes of the cache's codes, scales and zeros (rotation and Hadamard excluded), for memory accounting."""
        tensors = (self.k_codes, self.v_codes, self.k_scales, self.v_scales, self.k_zeros, self.v_zeros)
        return sum(t.numel() * t.element_size() for t in tensors)


def bytes_per_token(num_kv_heads: int, head_size: int, bits: int) -> int:
    """Cache bytes per token (all KV heads, K and V): codes plus float16 scale and zero per vector.
    bf16 needs ``2 * 2 * num_kv_heads * head_size``."""
    if bits not in BITS:
        raise ValueError(f"TurboQuant stores 4- or 8-bit codes, got bits={bits}")
    return 2 * num_kv_heads * (head_size * bits // 8 + 2 + 2)


def _check_shape(head_size: int, bits: int, block_size: int) -> None:
    if head_size not in HEAD_SIZES:
        raise ValueError(f"TurboQuant needs a power-of-two head size in {HEAD_SIZES} (Hadamard), got {head_size}")
    if bits not in BITS:
        raise ValueError(f"TurboQuant stores 4- or 8-bit codes, got bits={bits}")
    if block_size % 16 or not 16 <= block_size <= 128:
        raise ValueError(f"TurboQuant page size must be a multiple of 16 in 16..128, got {block_size}")


def allocate_cache(
    num_blocks: int,
    block_size: int,
    num_kv_heads: int,
    head_size: int,
    bits: int,
    device: torch.device | str,
    seed: int = 0,
    layout: str = "NHD",
) -> TurboQuantCache:
    """Zeroed cache (codes 0, scale 0, zero 0: every slot dequantizes to 0 until written)."""
    _check_shape(head_size, bits, block_size)
    if layout not in ("NHD", "HND"):
        raise ValueError(f"layout must be 'NHD' or 'HND', got {layout!r}")
    nbytes = head_size * bits // 8
    inner = (block_size, num_kv_heads) if layout == "NHD" else (num_kv_heads, block_size)

    def zeros(*tail: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(num_blocks, *inner, *tail, dtype=dtype, device=device)

    return TurboQuantCache(
        k_codes=zeros(nbytes, dtype=torch.uint8),
        v_codes=zeros(nbytes, dtype=torch.uint8),
        k_scales=zeros(dtype=torch.float16),
        v_scales=zeros(dtype=torch.float16),
        k_zeros=zeros(dtype=torch.float16),
        v_zeros=zeros(dtype=torch.float16),
        rotation=hadamard.random_signs(num_kv_heads, head_size, seed=seed, device=device),
        bits=bits,
        block_size=block_size,
        num_kv_heads=num_kv_heads,
        head_size=head_size,
        layout=layout,
        seed=seed,
        hadamard=hadamard.hadamard_matrix(head_size // 2, dtype=torch.bfloat16, device=device),
    )


def write(cache: TurboQuantCache, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Quantize new K/V [num_new, kv_heads, D] into flat slots ``block * block_size + offset`` (Triton;
    slots < 0 are skipped, as engines pad with -1)."""
    check_runnable(k, v, cache.k_codes)
    num_new, heads, d = k.shape
    if (heads, d) != (cache.num_kv_heads, cache.head_size) or v.shape != k.shape:
        raise ValueError(
            f"K and V must be [num_new, {cache.num_kv_heads}, {cache.head_size}]; "
            f"got K {tuple(k.shape)}, V {tuple(v.shape)}"
        )
    if k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("K and V must have a contiguous last dimension")
    if num_new == 0:
        return
    cs, ss = cache.code_strides(), cache.scale_strides()
    block_t = 16 if cache.head_size == 256 else 32
    tq_write_kernel[(cdiv(num_new, block_t), heads)](
        k,
        v,
        slot_mapping,
        cache.rotation,
        cache.k_codes,
        cache.v_codes,
        cache.k_scales,
        cache.k_zeros,
        cache.v_scales,
        cache.v_zeros,
        num_new,
        1.0 / math.sqrt(d),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        *cs,
        *ss,
        HEAD_D=d,
        BITS=cache.bits,
        BLOCK_T=block_t,
        PAGE_SIZE=cache.block_size,
        num_warps=4,
    )


# --- plain PyTorch: reference quantizer and dequantizer ------------------------------------------------------
def _minmax_quantize(r: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric min-max scalar quantizer over the last dimension: (codes int64, scale f16, zero f16)."""
    qmax = (1 << bits) - 1
    mx, mn = r.amax(-1), r.amin(-1)
    scale16 = ((mx - mn) / qmax).clamp(max=65504.0).to(torch.float16)
    zero16 = mn.clamp(-65504.0, 65504.0).to(torch.float16)
    scale, zero = scale16.float(), zero16.float()
    inv = torch.where(scale > 0, 1.0 / torch.where(scale > 0, scale, torch.ones_like(scale)), torch.zeros_like(scale))
    codes = torch.floor(((r - zero[..., None]) * inv[..., None]).clamp(0.0, qmax) + 0.5).long()
    return codes, scale16, zero16


def quantize_reference(
    x: torch.Tensor, signs: torch.Tensor, bits: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes int64 [..., H, D] in rotated order, scale f16 [..., H], zero f16 [..., H]) of vectors
    ``x[..., H, D]``: the same quantizer as the write kernel, in float32 PyTorch."""
    return _minmax_quantize(hadamard.rotate(x, signs), bits)


def round_trip_without_rotation(x: torch.Tensor, bits: int) -> torch.Tensor:
    """``x`` quantized and dequantized by the same quantizer on its raw coordinates: the ablation the
    rotation is measured against (outlier channels crush the other coordinates here)."""
    codes, scale, zero = _minmax_quantize(x.float(), bits)
    return codes.float() * scale.float()[..., None] + zero.float()[..., None]


def dequantize_reference(
    codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, signs: torch.Tensor, *, rotated: bool = False
) -> torch.Tensor:
    """float32 vectors from codes in rotated order (un-rotated unless ``rotated``)."""
    r = codes.float() * scale.float()[..., None] + zero.float()[..., None]
    return r if rotated else hadamard.unrotate(r, signs)


def unpack_codes(packed: torch.Tensor, bits: int, head_size: int) -> torch.Tensor:
    """int64 codes [..., D] in rotated order from the stored bytes."""
    p = packed.long()
    if bits == 8:
        return p
    return torch.cat([p & 15, p >> 4], dim=-1)


def dequantize(cache: TurboQuantCache, *, rotated: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(K, V) float32 [blocks, page, kv_heads, D] (NHD whatever the cache layout), un-rotated unless
    ``rotated``: what the attention kernel effectively attends to, for references and tests."""
    out = []
    for codes, scale, zero in (
        (cache.k_codes, cache.k_scales, cache.k_zeros),
        (cache.v_codes, cache.v_scales, cache.v_zeros),
    ):
        if cache.layout == "HND":
            codes, scale, zero = codes.transpose(1, 2), scale.transpose(1, 2), zero.transpose(1, 2)
        c = unpack_codes(codes, cache.bits, cache.head_size)
        out.append(dequantize_reference(c, scale, zero, cache.rotation, rotated=rotated))
    return out[0], out[1]


def write_reference(cache: TurboQuantCache, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """PyTorch twin of :func:`write` (any device, no Triton): for CPU tests and references."""
    ok = slot_mapping >= 0
    slots = slot_mapping[ok].long()
    blk, off = slots // cache.block_size, slots % cache.block_size
    for x, codes_t, scale_t, zero_t in (
        (k[ok], cache.k_codes, cache.k_scales, cache.k_zeros),
        (v[ok], cache.v_codes, cache.v_scales, cache.v_zeros),
    ):
        codes, scale, zero = quantize_reference(x, cache.rotation, cache.bits)
        half = cache.head_size // 2
        packed = codes if cache.bits == 8 else codes[..., :half] | (codes[..., half:] << 4)
        if cache.layout == "NHD":
            codes_t[blk, off] = packed.to(torch.uint8)
            scale_t[blk, off], zero_t[blk, off] = scale, zero
        else:
            codes_t.transpose(1, 2)[blk, off] = packed.to(torch.uint8)
            scale_t.transpose(1, 2)[blk, off], zero_t.transpose(1, 2)[blk, off] = scale, zero


# --- attention -------------------------------------------------------------------------------------------------
def paged_attention(
    q: torch.Tensor,
    cache: TurboQuantCache,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    *,
    max_query_len: int,
    max_seq_len: int,
    out: torch.Tensor,
    lse: torch.Tensor | None = None,
    softmax_scale: float,
    config: TritonAttnConfig | None = None,
    workspace: torch.Tensor | None = None,
) -> None:
    """Attention of ``q`` [tokens, heads, D] (fp16/bf16) over the quantized cache; same metadata, causal
    convention, LSE and workspace contract as :func:`hwtune.kernels.triton_attention.paged_attention`.
    Query heads of one GQA group share their KV head's rotation. No host sync: graph-capturable."""
    check_runnable(q, cache.k_codes)
    num_tokens, num_heads, head_size = check_query_io(q, out, lse)
    if head_size != cache.head_size or num_heads % cache.num_kv_heads:
        raise ValueError(
            f"q must be [tokens, a multiple of {cache.num_kv_heads} heads, {cache.head_size}]; got {tuple(q.shape)}"
        )
    batch = block_table.shape[0]
    if batch == 0 or num_tokens == 0:
        return  # nothing to attend (host ints: no sync)
    group = num_heads // cache.num_kv_heads
    if config is None:
        config = turboquant_config(
            bits=cache.bits,
            phase="decode" if max_query_len <= 1 else "mixed",
            batch=batch,
            max_query_len=max_query_len,
            max_seq_len=max_seq_len,
            head_size=head_size,
            gqa_group=group,
            num_sms=num_sms(q.device),
            num_kv_heads=cache.num_kv_heads,
        )
    plan = plan_launch(
        config,
        num_tokens=num_tokens,
        batch=batch,
        max_query_len=max_query_len,
        head_size=head_size,
        gqa_group=group,
        l2=l2_bytes(q.device),
        kv_bytes_per_request=max_seq_len * bytes_per_token(cache.num_kv_heads, head_size, cache.bits),
    )
    splits = plan.num_splits
    if splits > 1:
        part_o, part_lse, _counters = split_buffers(
            workspace, splits=splits, num_tokens=num_tokens, num_heads=num_heads, head_size=head_size, device=q.device
        )
        pl_strides = (part_lse.stride(0), part_lse.stride(1), part_lse.stride(2))
    else:
        part_o = part_lse = out
        pl_strides = (0, 0, 0)
    lse_arg = lse if lse is not None else out
    tq_attn_kernel[plan.grid(cache.num_kv_heads)](
        q,
        cache.k_codes,
        cache.v_codes,
        cache.k_scales,
        cache.k_zeros,
        cache.v_scales,
        cache.v_zeros,
        cache.rotation,
        cache.hadamard_half(),
        block_table,
        seq_lens,
        query_start_loc,
        out,
        lse_arg,
        part_o,
        part_lse,
        batch,
        cache.num_kv_heads,
        splits,
        float(softmax_scale) * LOG2E,
        1.0 / math.sqrt(head_size),
        q.stride(0),
        q.stride(1),
        *cache.code_strides(),
        *cache.scale_strides(),
        block_table.stride(0),
        out.stride(0),
        out.stride(1),
        lse_arg.stride(0),
        lse_arg.stride(1) if lse is not None else 0,
        *pl_strides,
        HEAD_D=head_size,
        BITS=cache.bits,
        BLOCK_M=plan.block_m,
        BLOCK_Q=plan.block_q,
        BLOCK_N=plan.block_n,
        GROUP=group,
        PAGE_SIZE=cache.block_size,
        ONE_PER_REQ=plan.one_per_req,
        HEADS_FAST=plan.heads_fast,
        SPLIT=splits > 1,
        WRITE_LSE=lse is not None,
        num_warps=plan.num_warps,
        num_stages=plan.num_stages,
    )
    if splits > 1:
        merge_splits(part_o, part_lse, out, lse, query_start_loc, batch)
