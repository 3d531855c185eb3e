"""Correctness cases for hwtune's Triton kernels, shared by the interpreter tests (CPU, small shapes) and the
GPU tests (real sizes). Each case builds a paged problem, runs a kernel, and returns named checks
``{name: (value, limit)}`` that pass when ``value <= limit``; the runner asserts them.

Importing this module imports only torch; the kernel modules are imported inside the functions, so the
interpreter runner can set TRITON_INTERPRET before triton is imported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from tests.kernels.reference import paged_attention_ref

Checks = dict[str, tuple[float, float]]


@dataclass(frozen=True)
class Problem:
    q_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    num_heads: int = 8
    num_kv_heads: int = 2
    head_size: int = 64
    page_size: int = 16
    dtype: torch.dtype = torch.bfloat16
    kv_dtype: torch.dtype | None = None  # None: same as dtype
    layout: str = "NHD"
    k_scale: float = 1.0
    v_scale: float = 1.0
    pad_tokens: int = 0  # extra query rows past the batch (CUDA-graph padding): must stay untouched
    config: dict = field(default_factory=dict)  # TritonAttnConfig fields; empty = default_config
    kv_loads: str = "auto"  # paged_attention's KV tile loads: auto, tma, gather
    poison_tail: bool = False  # NaN in each request's last page past its context: must never be weighed


def _tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return (1.5e-2, 2e-2) if dtype == torch.bfloat16 else (3e-3, 5e-3)


def build(p: Problem, device: str, seed: int = 0) -> dict:
    """Paged inputs: a FlashInfer-style KV tensor [blocks, 2, ...] (so K/V are strided views), shuffled
    pages, a block table wider than needed, query_start_loc / seq_lens as int32."""
    g = torch.Generator().manual_seed(seed)
    pages = [math.ceil(s / p.page_size) for s in p.seq_lens]
    num_blocks = sum(pages) + 3
    inner = (p.page_size, p.num_kv_heads) if p.layout == "NHD" else (p.num_kv_heads, p.page_size)
    kv = torch.randn(num_blocks, 2, *inner, p.head_size, generator=g)
    kv_dtype = p.kv_dtype or p.dtype
    kv = (kv * 0.5).to(kv_dtype) if kv_dtype == torch.float8_e4m3fn else kv.to(kv_dtype)
    perm = torch.randperm(num_blocks, generator=g)
    table = torch.zeros(len(p.seq_lens), max(pages) + 2, dtype=torch.int32)
    used = 0
    for r, n in enumerate(pages):
        table[r, :n] = perm[used : used + n].int()
        used += n
    if p.poison_tail:
        for r, (n, s) in enumerate(zip(pages, p.seq_lens)):
            tail = kv[int(table[r, n - 1])]  # [2, page, heads, D] (NHD) or [2, heads, page, D] (HND)
            (
                tail[:, s - (n - 1) * p.page_size :] if p.layout == "NHD" else tail[:, :, s - (n - 1) * p.page_size :]
            ).fill_(float("nan"))
    qsl = torch.tensor([0, *torch.tensor(p.q_lens).cumsum(0).tolist()], dtype=torch.int32)
    num_tokens = int(qsl[-1]) + p.pad_tokens
    q = torch.randn(num_tokens, p.num_heads, p.head_size, generator=g).to(p.dtype)
    return {
        "q": q.to(device),
        "kv": kv.to(device),
        "block_table": table.to(device),
        "seq_lens": torch.tensor(p.seq_lens, dtype=torch.int32, device=device),
        "qsl": qsl.to(device),
    }


def _config(p: Problem):
    from hwtune.kernels.triton_attention import TritonAttnConfig

    if not p.config:
        return None
    return TritonAttnConfig(**{"num_warps": 4, "num_stages": 2, "num_splits": 1, **p.config})


def run_triton(p: Problem, t: dict, *, seq_lens=None, block_table=None, workspace=None):
    from hwtune.kernels.triton_attention import paged_attention

    q = t["q"]
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:2], float("nan"), dtype=torch.float32, device=q.device)
    seq_lens = t["seq_lens"] if seq_lens is None else seq_lens
    block_table = t["block_table"] if block_table is None else block_table
    paged_attention(
        q,
        t["kv"][:, 0],
        t["kv"][:, 1],
        block_table,
        seq_lens,
        t["qsl"],
        max_query_len=max(p.q_lens),
        max_seq_len=max(p.seq_lens),
        out=out,
        lse=lse,
        softmax_scale=p.head_size**-0.5,
        kv_layout=p.layout,
        k_scale=p.k_scale,
        v_scale=p.v_scale,
        config=_config(p),
        workspace=workspace,
        kv_loads=p.kv_loads,
    )
    return out, lse


def compare(
    p: Problem,
    out: torch.Tensor,
    lse: torch.Tensor,
    ref_out: torch.Tensor,
    ref_lse: torch.Tensor,
    *,
    lse_limit: float = 2e-3,
) -> Checks:
    atol, rtol = _tolerance(p.dtype)
    n = sum(p.q_lens)  # rows past it are CUDA-graph padding
    o = out[:n].float()
    ref_out, ref_lse = ref_out[:n].to(o.device), ref_lse[:n].to(o.device)
    err = ((o - ref_out).abs() / (atol + rtol * ref_out.abs())).max().item()
    checks: Checks = {
        "output_error/tolerance": (err, 1.0),
        "unwritten_outputs": (float(torch.isnan(o).sum()), 0.0),
        "lse_abs_error": ((lse[:n] - ref_lse).abs().max().item(), lse_limit),
    }
    if out.shape[0] > n:
        checks["padding_rows_written"] = (float((~torch.isnan(out[n:].float())).sum()), 0.0)
    return checks


def check_triton(p: Problem, device: str) -> Checks:
    t = build(p, device)
    out, lse = run_triton(p, t)
    ref_out, ref_lse = paged_attention_ref(
        t["q"],
        t["kv"][:, 0],
        t["kv"][:, 1],
        t["block_table"],
        t["seq_lens"],
        t["qsl"],
        softmax_scale=p.head_size**-0.5,
        kv_layout=p.layout,
        k_scale=p.k_scale,
        v_scale=p.v_scale,
    )
    return compare(p, out, lse, ref_out, ref_lse)


def check_shared_workspace(p: Problem, device: str) -> Checks:
    """One zeroed workspace, its partials NaN-filled, serves three split decode calls of different shapes (the
    problem, its batch reversed and cut to fewer requests, the problem again): each must match the reference, and
    the in-kernel merge must leave every arrival counter at zero (a counter left over would merge a later call
    early)."""
    from hwtune.kernels.configs import MERGE_COUNTER_WORDS, workspace_size

    heads, tokens = p.num_heads, sum(p.q_lens)
    ws = torch.zeros(
        workspace_size(num_tokens=tokens, num_heads=heads, head_size=p.head_size, num_splits=p.config["num_splits"]),
        device=device,
    )
    ws[MERGE_COUNTER_WORDS:] = float("nan")
    cut = max(1, len(p.q_lens) - 1)
    problems = (p, replace(p, q_lens=p.q_lens[::-1][:cut], seq_lens=p.seq_lens[::-1][:cut]), p)
    checks: Checks = {}
    for i, pi in enumerate(problems):
        t = build(pi, device, seed=i)
        out, lse = run_triton(pi, t, workspace=ws)
        ref = paged_attention_ref(
            t["q"], t["kv"][:, 0], t["kv"][:, 1], t["block_table"], t["seq_lens"], t["qsl"],
            softmax_scale=p.head_size**-0.5, kv_layout=p.layout,
        )  # fmt: skip
        checks.update({f"call{i}/{k}": v for k, v in compare(pi, out, lse, *ref).items()})
    checks["counters_left_nonzero"] = (float((ws[:MERGE_COUNTER_WORDS].view(torch.int32) != 0).sum()), 0.0)
    return checks


def merge_by_lse(o1, l1, o2, l2):
    lse = torch.logaddexp(l1, l2)
    return (torch.exp(l1 - lse)[..., None] * o1.float() + torch.exp(l2 - lse)[..., None] * o2.float()), lse


def check_dcp_merge(p: Problem, device: str, *, turboquant_bits: int | None = None) -> Checks:
    """Decode (one query token per request): attention over the whole KV equals the LSE-merge of attention
    over the first pages and over the rest, each run by the kernel (what DCP relies on)."""
    assert all(n == 1 for n in p.q_lens)
    t = build(p, device)
    halves = [[], []]
    for r, s in enumerate(p.seq_lens):
        cut = max(1, (s // 2) // p.page_size) * p.page_size
        assert 0 < cut < s, "each request needs KV on both sides of the cut"
        halves[0].append((t["block_table"][r], cut))
        shifted = torch.zeros_like(t["block_table"][r])
        shifted[: t["block_table"].shape[1] - cut // p.page_size] = t["block_table"][r, cut // p.page_size :]
        halves[1].append((shifted, s - cut))
    runs = []
    for half in halves:
        table = torch.stack([row for row, _ in half])
        lens = torch.tensor([n for _, n in half], dtype=torch.int32, device=device)
        if turboquant_bits is None:
            runs.append(run_triton(p, t, seq_lens=lens, block_table=table))
        else:
            runs.append(run_turboquant(p, t, turboquant_bits, seq_lens=lens, block_table=table))
    full = run_triton(p, t) if turboquant_bits is None else run_turboquant(p, t, turboquant_bits)
    merged_o, merged_l = merge_by_lse(runs[0][0], runs[0][1], runs[1][0], runs[1][1])
    atol, rtol = _tolerance(p.dtype)
    ref = full[0].float()
    return {
        "merged_vs_full_output/tolerance": (((merged_o - ref).abs() / (atol + rtol * ref.abs())).max().item(), 1.0),
        "merged_vs_full_lse": ((merged_l - full[1]).abs().max().item(), 1e-3),
    }


def check_metadata_change(p: Problem, device: str) -> Checks:
    """Same buffers, new metadata written in place between calls (other query split, shorter contexts in
    the same pages, two pages swapped): the second call must follow it (nothing cached from the first)."""
    t = build(p, device)
    run_triton(p, t)
    g = torch.Generator().manual_seed(7)
    n = len(p.q_lens)
    q_lens = tuple(reversed(p.q_lens))
    seq_lens = tuple(
        max(ql, s - int(torch.randint(0, p.page_size, (1,), generator=g))) for ql, s in zip(q_lens, p.seq_lens)
    )
    seq_lens = tuple(
        max(s, (math.ceil(old / p.page_size) - 1) * p.page_size + 1) for s, old in zip(seq_lens, p.seq_lens)
    )  # same page count per request
    p2 = replace(p, q_lens=q_lens, seq_lens=seq_lens)
    t["seq_lens"].copy_(torch.tensor(seq_lens, dtype=torch.int32))
    t["qsl"].copy_(torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32))
    row = t["block_table"][n - 1]
    row[0], row[1] = row[1].clone(), row[0].clone()
    t["q"].copy_(torch.randn(t["q"].shape, generator=g).to(p.dtype))
    out, lse = run_triton(p2, t)
    ref_out, ref_lse = paged_attention_ref(
        t["q"],
        t["kv"][:, 0],
        t["kv"][:, 1],
        t["block_table"],
        t["seq_lens"],
        t["qsl"],
        softmax_scale=p.head_size**-0.5,
        kv_layout=p.layout,
    )
    return compare(p2, out, lse, ref_out, ref_lse)


# --- TurboQuant ------------------------------------------------------------------------------------------------
def tq_cache_from(p: Problem, t: dict, bits: int, *, outlier_channels: int = 0):
    """Quantize the problem's KV (bf16 values of ``t['kv']``, read through the NHD/HND views) into a
    TurboQuant cache with the same page ids, via the write kernel; returns (cache, slot_mapping, k, v)."""
    from hwtune.kernels import turboquant as tq

    kv = t["kv"].float()
    if p.layout == "HND":
        kv = kv.transpose(2, 3)
    k, v = kv[:, 0].clone(), kv[:, 1].clone()  # [blocks, page, heads, D]
    if outlier_channels:
        k[..., :outlier_channels] *= 20.0
    cache = tq.allocate_cache(
        kv.shape[0], p.page_size, p.num_kv_heads, p.head_size, bits, t["q"].device, layout=p.layout
    )
    n = kv.shape[0] * p.page_size
    slots = torch.arange(n, device=t["q"].device)
    k_new = k.reshape(n, p.num_kv_heads, p.head_size).to(p.dtype)
    v_new = v.reshape(n, p.num_kv_heads, p.head_size).to(p.dtype)
    tq.write(cache, k_new, v_new, slots)
    return cache, slots, k_new, v_new


def run_turboquant(p: Problem, t: dict, bits: int, *, seq_lens=None, block_table=None, cache=None):
    from hwtune.kernels import turboquant as tq

    if cache is None:
        cache = t.get(("tq", bits)) or tq_cache_from(p, t, bits)[0]
        t[("tq", bits)] = cache
    q = t["q"]
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:2], float("nan"), dtype=torch.float32, device=q.device)
    tq.paged_attention(
        q,
        cache,
        t["block_table"] if block_table is None else block_table,
        t["seq_lens"] if seq_lens is None else seq_lens,
        t["qsl"],
        max_query_len=max(p.q_lens),
        max_seq_len=max(p.seq_lens),
        out=out,
        lse=lse,
        softmax_scale=p.head_size**-0.5,
        config=_config(p),
    )
    return out, lse


def check_turboquant(p: Problem, bits: int, device: str) -> Checks:
    """Attention on codes vs the float32 reference over the dequantized cache (same codes)."""
    from hwtune.kernels import turboquant as tq

    t = build(p, device)
    cache = tq_cache_from(p, t, bits)[0]
    t[("tq", bits)] = cache
    out, lse = run_turboquant(p, t, bits, cache=cache)
    k, v = tq.dequantize(cache)
    ref_out, ref_lse = paged_attention_ref(
        t["q"], k, v, t["block_table"], t["seq_lens"], t["qsl"], softmax_scale=p.head_size**-0.5
    )
    checks = compare(p, out, lse, ref_out, ref_lse, lse_limit=3e-3)
    # An error that is constant across lanes in the rotated space lands on output lane 0 after
    # un-rotation (H @ ones = D * e0); a rounding slip of that kind hides under the tolerance but shows here.
    n = sum(p.q_lens)
    lane_rms = (out[:n].float() - ref_out[:n].to(out.device)).pow(2).reshape(-1, p.head_size).mean(0).sqrt()
    checks["lane0_error_rms/median_lane_rms"] = ((lane_rms[0] / lane_rms.median().clamp_min(1e-12)).item(), 4.0)
    return checks


def check_turboquant_write(p: Problem, bits: int, device: str) -> Checks:
    """The write kernel's codes/scales/zeros equal the PyTorch reference quantizer's (rounding ties in the
    rotation may move a code by one), and slots marked -1 are left alone."""
    from hwtune.kernels import turboquant as tq

    t = build(p, device)
    cache, slots, k, v = tq_cache_from(p, t, bits)
    ref = tq.allocate_cache(
        cache.k_codes.shape[0], p.page_size, p.num_kv_heads, p.head_size, bits, "cpu", layout=p.layout
    )
    tq.write_reference(ref, k.cpu(), v.cpu(), slots.cpu())
    checks: Checks = {}
    for name in ("k", "v"):
        got = tq.unpack_codes(getattr(cache, f"{name}_codes").cpu(), bits, p.head_size)
        exp = tq.unpack_codes(getattr(ref, f"{name}_codes"), bits, p.head_size)
        checks[f"{name}_codes_max_diff"] = (float((got - exp).abs().max()), 1.0)
        checks[f"{name}_codes_diff_fraction"] = (float((got != exp).float().mean()), 2e-3)
        for part in ("scales", "zeros"):
            a = getattr(cache, f"{name}_{part}").float().cpu()
            b = getattr(ref, f"{name}_{part}").float()
            checks[f"{name}_{part}_rel_diff"] = (float(((a - b).abs() / (b.abs() + 1e-3)).max()), 2e-3)
    # a second write over the first pages with every other slot -1: those slots keep their bytes
    # (K scaled by 4, exact in bf16: same codes, four times the scale)
    before = _by_slot(cache.k_codes, p.layout).clone()
    before_scale = _by_slot(cache.k_scales, p.layout).clone()
    skip = slots[: 2 * p.page_size].clone()
    skip[::2] = -1
    tq.write(cache, (k[: skip.numel()] * 4).contiguous(), v[: skip.numel()].contiguous(), skip)
    after, after_scale = _by_slot(cache.k_codes, p.layout), _by_slot(cache.k_scales, p.layout)
    idx = torch.arange(skip.numel(), device=skip.device)
    kept, written = idx[skip == -1], idx[skip >= 0]
    checks["skipped_slots_modified"] = (
        float((after[kept] != before[kept]).sum() + (after_scale[kept] != before_scale[kept]).sum()),
        0.0,
    )
    ratio = after_scale[written].float() / before_scale[written].float()
    checks["written_scale_ratio_error"] = (float((ratio - 4.0).abs().max()), 3e-3)
    return checks


def _by_slot(x: torch.Tensor, layout: str) -> torch.Tensor:
    """[slots, heads, ...] view of a cache tensor in either layout."""
    if layout == "HND":
        x = x.transpose(1, 2)
    return x.reshape(-1, *x.shape[2:])
