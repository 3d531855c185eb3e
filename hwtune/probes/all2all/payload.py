"""Dispatch payloads: bf16, fp8 with 128-wide block scales, and nvfp4, quantised and dequantised in torch.

An all2all moves bytes; it must not change them. So the harness quantises each rank's activations once,
moves the quantised parts, and checks that (a) the received bytes equal the sent bytes and (b) the
combined result equals the *dequantised* payload times the routing weights: quantisation error is not the
candidate's fault and never enters the tolerance.

Formats (as vLLM / FlashInfer lay them out for MoE dispatch):

* ``bf16``: one part, the activations ``[T, H]`` bf16.
* ``fp8``: DeepSeek-style block quantisation: ``q`` float8_e4m3fn ``[T, H]`` and ``scales`` fp32
  ``[T, H/128]``, one scale per 128 consecutive elements (``scale = amax / 448``).
* ``nvfp4``: ``packed`` uint8 ``[T, H/2]`` (two e2m1 values per byte, element ``2i`` in the low nibble),
  ``block_scales`` float8_e4m3fn ``[T, H/16]`` (one per 16 elements) and a per-tensor fp32
  ``global_scale``. As in vLLM, the global scale is a static, calibrated per-layer constant known to every
  rank, so it is not sent: ``x ~ e2m1 * block_scale / global_scale``, with
  ``global_scale = 448 * 6 / amax``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

KINDS = ("bf16", "fp8", "nvfp4")
FP8_BLOCK = 128
FP4_BLOCK = 16
FP8_MAX = 448.0
FP4_MAX = 6.0
#: e2m1 magnitudes by code (bits 0-2); bit 3 is the sign.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


class PayloadShapeError(ValueError):
    """The hidden size does not fit the format's block size (reported as ``unsupported``)."""


@dataclass
class Payload:
    """Quantised activations of some tokens: ``parts`` are row-aligned tensors ``[T, *]``."""

    kind: str
    parts: list[torch.Tensor]
    hidden: int
    global_scale: float | None = None

    @property
    def num_tokens(self) -> int:
        """Rows (tokens) of the payload."""
        return int(self.parts[0].shape[0])

    def bytes_per_token(self) -> int:
        """Bytes one token's parts occupy on the wire (for bandwidth figures)."""
        return sum(math.prod(p.shape[1:]) * p.element_size() for p in self.parts)

    def index_select(self, rows: torch.Tensor) -> Payload:
        """The payload of the selected rows, parts kept row-aligned and the global scale carried along."""
        return Payload(self.kind, [p.index_select(0, rows) for p in self.parts], self.hidden, self.global_scale)

    def with_parts(self, parts: list[torch.Tensor]) -> Payload:
        """A payload of the same format over other (e.g. received) parts, keeping kind, hidden and global scale."""
        return Payload(self.kind, parts, self.hidden, self.global_scale)


def part_dtypes(kind: str) -> list[torch.dtype]:
    """The dtype of each part, in order, so a receiver can view raw bytes back as the sent parts."""
    if kind == "bf16":
        return [torch.bfloat16]
    if kind == "fp8":
        return [torch.float8_e4m3fn, torch.float32]
    if kind == "nvfp4":
        return [torch.uint8, torch.float8_e4m3fn]
    raise ValueError(f"unknown payload kind {kind!r}; known: {', '.join(KINDS)}")


def part_widths(kind: str, hidden: int) -> list[int]:
    """Elements per token of each part."""
    check_hidden(kind, hidden)
    if kind == "bf16":
        return [hidden]
    if kind == "fp8":
        return [hidden, hidden // FP8_BLOCK]
    return [hidden // 2, hidden // FP4_BLOCK]


def bytes_per_token(kind: str, hidden: int) -> int:
    """Bytes per token of a ``kind`` payload of width ``hidden``, computed without quantising anything."""
    return sum(
        w * torch.empty((), dtype=d).element_size() for w, d in zip(part_widths(kind, hidden), part_dtypes(kind))
    )


def check_hidden(kind: str, hidden: int) -> None:
    """Raise PayloadShapeError (reported as ``unsupported``) when ``kind`` is unknown or its block size does not
    divide ``hidden``."""
    if kind == "fp8" and hidden % FP8_BLOCK:
        raise PayloadShapeError(
            f"fp8 block quantisation needs a hidden size that is a multiple of {FP8_BLOCK}; got {hidden}"
        )
    if kind == "nvfp4" and hidden % FP4_BLOCK:
        raise PayloadShapeError(f"nvfp4 needs a hidden size that is a multiple of {FP4_BLOCK}; got {hidden}")
    if kind not in KINDS:
        raise PayloadShapeError(f"hwtune's all2all harness has no {kind} payload; it has {', '.join(KINDS)}")


def nvfp4_global_scale(amax: float) -> float:
    """The static per-tensor nvfp4 scale for activations whose absolute maximum is ``amax``."""
    return FP8_MAX * FP4_MAX / max(float(amax), 1e-12)


def quantize(x: torch.Tensor, kind: str, global_scale: float | None = None) -> Payload:
    """Quantise bf16 activations ``[T, H]`` to ``kind``; nvfp4 needs the shared ``global_scale``."""
    t, h = x.shape
    check_hidden(kind, h)
    if kind == "bf16":
        return Payload("bf16", [x.to(torch.bfloat16).contiguous()], h)
    xf = x.float()
    if kind == "fp8":
        blocks = xf.view(t, h // FP8_BLOCK, FP8_BLOCK)
        scale = (blocks.abs().amax(dim=2) / FP8_MAX).clamp(min=1e-12)
        q = (blocks / scale[:, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(t, h)
        return Payload("fp8", [q.contiguous(), scale.contiguous()], h)
    if global_scale is None:
        raise ValueError("nvfp4 quantisation needs the shared global_scale (see nvfp4_global_scale)")
    blocks = xf.view(t, h // FP4_BLOCK, FP4_BLOCK)
    block_amax = blocks.abs().amax(dim=2)
    sf = (block_amax / FP4_MAX * global_scale).clamp(max=FP8_MAX).to(torch.float8_e4m3fn)
    sf_f = sf.float()
    safe = torch.where(sf_f > 0, sf_f, torch.ones_like(sf_f))
    scaled = blocks * (global_scale / safe)[:, :, None]
    codes = e2m1_encode(scaled.reshape(t, h))
    return Payload("nvfp4", [pack_nibbles(codes), sf.contiguous()], h, float(global_scale))


def dequantize(p: Payload) -> torch.Tensor:
    """float32 ``[T, H]`` values the expert sees."""
    if p.kind == "bf16":
        return p.parts[0].float()
    t = p.num_tokens
    if p.kind == "fp8":
        q, scale = p.parts
        blocks = q.float().view(t, p.hidden // FP8_BLOCK, FP8_BLOCK)
        return (blocks * scale.float()[:, :, None]).view(t, p.hidden)
    if p.kind == "nvfp4":
        assert p.global_scale is not None
        packed, sf = p.parts
        vals = e2m1_decode(unpack_nibbles(packed)).view(t, p.hidden // FP4_BLOCK, FP4_BLOCK)
        return (vals * (sf.float() / p.global_scale)[:, :, None]).view(t, p.hidden)
    raise ValueError(f"unknown payload kind {p.kind!r}")


def e2m1_encode(v: torch.Tensor) -> torch.Tensor:
    """Round float values (already scaled into [-6, 6]) to the nearest e2m1 code, uint8 in 0..15."""
    mids = torch.tensor(_E2M1_MIDPOINTS, dtype=torch.float32, device=v.device)
    mag = torch.bucketize(v.abs().clamp(max=FP4_MAX).contiguous(), mids)
    sign = (v < 0) & (mag > 0)
    return (mag + sign.to(mag.dtype) * 8).to(torch.uint8)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """Float32 values of e2m1 codes (0..15, bit 3 the sign): the inverse of ``e2m1_encode``."""
    lut = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=torch.float32, device=codes.device)
    return lut[codes.to(torch.int64)]


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[T, H] codes -> [T, H/2] bytes, element 2i in the low nibble (FlashInfer's fp4 layout)."""
    lo, hi = codes[:, 0::2], codes[:, 1::2]
    return (lo | (hi << 4)).to(torch.uint8).contiguous()


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """[T, H/2] bytes -> [T, H] codes, element 2i from the low nibble: the inverse of ``pack_nibbles``."""
    t, half = packed.shape
    out = torch.empty((t, half * 2), dtype=torch.uint8, device=packed.device)
    out[:, 0::2] = packed & 0x0F
    out[:, 1::2] = packed >> 4
    return out


# --- raw bytes, for collectives that do not know fp8 (gloo) -------------------------------------------------


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A 2-D tensor's rows as uint8 (a view: no copy)."""
    t = t.contiguous()
    return t.view(torch.uint8).view(t.shape[0], math.prod(t.shape[1:]) * t.element_size())


def pack_rows(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate row-aligned tensors of any dtypes into one uint8 ``[T, bytes]`` tensor (one copy)."""
    return torch.cat([as_bytes(t) for t in tensors], dim=1)


def unpack_rows(rows: torch.Tensor, dtypes: list[torch.dtype], widths: list[int]) -> list[torch.Tensor]:
    """Inverse of :func:`pack_rows`: slice the byte columns and view them back as the given dtypes."""
    out, col = [], 0
    for dt, w in zip(dtypes, widths):
        nbytes = w * torch.empty((), dtype=dt).element_size()
        out.append(rows[:, col : col + nbytes].contiguous().view(dt))
        col += nbytes
    if col != rows.shape[1]:
        raise ValueError(f"row holds {rows.shape[1]} bytes but the parts need {col}")
    return out
