"""The correctness gate: a candidate's output against the float32 reference, before any timing.

Three things must hold: every output element was written (outputs are NaN-filled before each run, so an
unwritten element stays NaN), the error is within a dtype-aware tolerance both overall and for every
(token, head) row (so one wrong request in a batch of 512 cannot hide in an average), and where the
candidate returns the LSE, the LSE matches too.

Tolerances (relative L2 error of the output; a row may be 4x worse): float32 1e-4; float16 1e-2;
bfloat16 2e-2; fp8 KV 5e-2 (compared with the reference on the dequantised cache, so only rounding of q, of
the probabilities and of the output counts, plus fp8 queries in kernels that quantise them). A real bug
(wrong page, missed mask, stale length) gives errors of order 1.

MLA (``compare_latent``): a candidate writes the latent output ``[tokens, heads, kv_lora_rank]``; every element must
be written, and its projection by each head's ``W_UV`` is compared with the reference's multi-head attention output
at the same tolerances (``hwtune.probes.attention.mla``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

REL_L2_TOL = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}
FP8_REL_L2_TOL = 5e-2
ROW_FACTOR = 4.0
LSE_ABS_TOL = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 3e-2}
FP8_LSE_ABS_TOL = 6e-2


@dataclass
class Verdict:
    """The outcome of one comparison: pass/fail, the error figures (recorded either way) and the problems found."""

    ok: bool
    figures: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def message(self, label: str) -> str:
        """The problems as one line, prefixed with which check found them ("batch A (graph replay)", ...)."""
        return f"{label}: " + "; ".join(self.problems)


def tolerances(dtype: str, kv_cache_dtype: str) -> tuple[float, float]:
    """(relative L2 tolerance of the output, absolute LSE tolerance) for this spec."""
    if kv_cache_dtype.startswith("fp8") or kv_cache_dtype.startswith("turboquant"):
        return FP8_REL_L2_TOL, FP8_LSE_ABS_TOL
    return REL_L2_TOL[dtype], LSE_ABS_TOL[dtype]


def compare(
    out: torch.Tensor,
    ref: torch.Tensor,
    *,
    rel_tol: float,
    lse: torch.Tensor | None = None,
    ref_lse: torch.Tensor | None = None,
    lse_tol: float = 3e-2,
) -> Verdict:
    """Compare one output (and optional LSE) with the reference; figures are recorded either way."""
    v = Verdict(ok=True)
    o = out.float().reshape(ref.shape)
    unwritten = int(torch.isnan(o).sum())
    nonfinite = int((~torch.isfinite(o)).sum()) - unwritten
    v.figures["unwritten"] = unwritten
    if unwritten:
        v.problems.append(f"{unwritten} of {o.numel()} output elements were never written (still NaN)")
    if nonfinite:
        v.problems.append(f"{nonfinite} output elements are infinite")
    o = torch.nan_to_num(o, nan=0.0, posinf=0.0, neginf=0.0)
    diff = o - ref
    ref_norm = float(ref.norm())
    rel_l2 = float(diff.norm()) / max(ref_norm, 1e-30)
    rms = ref_norm / math.sqrt(max(1, ref.numel()))
    rows_ref = ref.reshape(-1, ref.shape[-1]).norm(dim=-1)
    rows_err = diff.reshape(-1, ref.shape[-1]).norm(dim=-1)
    row_rel = float((rows_err / (rows_ref + 1e-3 * rms * math.sqrt(ref.shape[-1]))).max()) if rows_ref.numel() else 0.0
    v.figures.update(rel_l2=rel_l2, max_row_rel=row_rel, max_abs=float(diff.abs().max()) if diff.numel() else 0.0)
    if not rel_l2 <= rel_tol:
        v.problems.append(f"relative L2 error {rel_l2:.3g} exceeds {rel_tol:g}")
    if not row_rel <= ROW_FACTOR * rel_tol:
        worst = int((rows_err / (rows_ref + 1e-30)).argmax())
        v.problems.append(
            f"worst (token, head) row has relative error {row_rel:.3g} > {ROW_FACTOR * rel_tol:g} "
            f"(row {worst // ref.shape[-2]} head {worst % ref.shape[-2]})"
        )
    if lse is not None and ref_lse is not None:
        got = lse.float().reshape(ref_lse.shape)
        bad = int((~torch.isfinite(got)).sum())
        lse_err = float((torch.nan_to_num(got, nan=1e30) - ref_lse).abs().max()) if got.numel() else 0.0
        v.figures["lse_max_abs"] = lse_err
        if bad:
            v.problems.append(f"{bad} LSE values are NaN or infinite")
        elif not lse_err <= lse_tol:
            v.problems.append(f"LSE differs from the reference by up to {lse_err:.3g} (tolerance {lse_tol:g})")
    v.ok = not v.problems
    return v


def compare_latent(
    out: torch.Tensor,
    ref: torch.Tensor,
    *,
    project: Callable[[torch.Tensor], torch.Tensor],
    rel_tol: float,
    lse: torch.Tensor | None = None,
    ref_lse: torch.Tensor | None = None,
    lse_tol: float = 3e-2,
) -> Verdict:
    """``compare`` for an MLA latent output: unwritten (NaN) or infinite latent elements are counted on the latent
    itself (a projection would smear one over its whole row), then ``project(out)`` is compared with ``ref``."""
    o = out.float()
    unwritten = int(torch.isnan(o).sum())
    nonfinite = int((~torch.isfinite(o)).sum()) - unwritten
    clean = torch.nan_to_num(o, nan=0.0, posinf=0.0, neginf=0.0)
    v = compare(project(clean), ref, rel_tol=rel_tol, lse=lse, ref_lse=ref_lse, lse_tol=lse_tol)
    v.figures["unwritten"] = unwritten
    if nonfinite:
        v.problems.insert(0, f"{nonfinite} latent output elements are infinite")
    if unwritten:
        v.problems.insert(0, f"{unwritten} of {o.numel()} latent output elements were never written (still NaN)")
    v.ok = not v.problems
    return v
