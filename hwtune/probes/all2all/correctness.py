"""Correctness before timing: what arrived where, what came back, and whether every rank agrees.

Each rank regenerates every rank's tokens and routing from the seed (``routing.py``), so it checks the
candidate against the routing itself, not against another collective:

1. Dispatch: the multiset of (source rank, source token, expert) triples that reached this rank's experts
   equals the routing's (none missing, none extra, none duplicated, no expert of another rank); each
   triple's routing weight arrived bit-exact; each received row's payload bytes equal the sent bytes.
2. Combine, with identity experts: each local token comes back as ``dequant(x) * sum(weights)``, within
   bf16 rounding of the summation: ``(top_k + 1) * 2**-8 * |reference|`` per element. Weights lie in
   [0.5, 1), so one dropped or duplicated expert moves the result by at least ``1 / (2 * top_k)`` of it,
   beyond that bound. Non-finite values always fail.
3. Agreement: every rank's verdict is gathered; the workload passes only if all ranks pass, and every rank
   reaches the same decision from the same gathered list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from hwtune.core.types import All2AllSpec
from hwtune.probes.all2all.candidates.base import Dispatched, LocalBatch, RankContext
from hwtune.probes.all2all.payload import as_bytes, dequantize, nvfp4_global_scale, quantize
from hwtune.probes.all2all.routing import make_hidden, make_routing, owner_rank

BF16_UNIT = 2.0**-8


@dataclass
class Sources:
    """Every rank's batch for one workload (regenerated locally on each rank)."""

    batches: list[LocalBatch]

    @property
    def tokens(self) -> int:
        """Tokens per rank (every rank sends the same number)."""
        return self.batches[0].num_tokens


def build_sources(spec: All2AllSpec, tokens: int, routing: str, *, seed: int, device: torch.device) -> Sources:
    """Each rank's activations, routing and quantised payload, exactly as each rank builds its own."""
    xs = [make_hidden(tokens, spec.hidden_size, seed=seed, rank=r, device=device) for r in range(spec.ep_size)]
    gscale = None
    if spec.quant_dtype == "nvfp4":  # static calibrated scale shared by all ranks (see payload.py)
        gscale = nvfp4_global_scale(max(float(x.float().abs().max()) for x in xs))
    batches = []
    for r, x in enumerate(xs):
        rt = make_routing(tokens, spec.num_experts, spec.topk, routing, seed=seed, rank=r, device=device)
        batches.append(LocalBatch(quantize(x, spec.quant_dtype, gscale), rt.topk_ids, rt.topk_weights))
    return Sources(batches)


@dataclass
class Verdict:
    """One rank's correctness result: pass/fail with reasons, and the error figures that go into the record; gathered
    from every rank so that all reach the same decision."""

    rank: int
    passed: bool = True
    reasons: list[str] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)

    def fail(self, reason: str) -> None:
        """Record a failure reason; a verdict keeps every reason so the record says all that went wrong."""
        self.passed = False
        self.reasons.append(reason)


def identity_expert(d: Dispatched) -> torch.Tensor:
    """The experts' output for each received row: dequant(row) * sum of its local routing weights (bf16)."""
    local = d.expert_ids >= 0
    w = torch.where(local, d.weights.float(), torch.zeros_like(d.weights, dtype=torch.float32)).sum(dim=1)
    keep = local.any(dim=1)
    if d.valid is not None:
        keep = keep & d.valid
    x = dequantize(d.payload)
    out = torch.where(keep[:, None], x * w[:, None], torch.zeros_like(x))
    return out.to(torch.bfloat16)


def _keys(
    src_rank: torch.Tensor, src_token: torch.Tensor, ids: torch.Tensor, tokens: int, experts: int
) -> torch.Tensor:
    return ((src_rank * tokens + src_token)[:, None] * experts + ids).flatten()


def verify_dispatch(d: Dispatched, sources: Sources, spec: All2AllSpec, rank: int, v: Verdict) -> None:
    """Counts and contents of what reached this rank, against the routing (see module docstring)."""
    if d.src_rank is None or d.src_token is None:
        v.fail("the candidate did not report where its received rows came from (verify mode)")
        return
    dev, t, e, ws = d.expert_ids.device, sources.tokens, spec.num_experts, spec.ep_size
    rows = torch.ones(d.num_rows, dtype=torch.bool, device=dev) if d.valid is None else d.valid.to(dev)
    src_rank, src_token = d.src_rank.to(dev).long(), d.src_token.to(dev).long()
    in_range = (src_rank >= 0) & (src_rank < ws) & (src_token >= 0) & (src_token < t)
    bad_origin = int((rows & ~in_range).sum())
    if bad_origin:
        v.fail(f"{bad_origin} received rows name a source rank or token that does not exist")
    rows = rows & in_range
    ids = d.expert_ids.to(dev).long()[rows]
    weights = d.weights.to(dev).float()[rows]
    sr, st = src_rank[rows], src_token[rows]
    used = ids >= 0
    foreign = int((used & (owner_rank(ids.clamp(min=0), e, ws) != rank)).sum())
    if foreign:
        v.fail(f"{foreign} (token, expert) pairs reached rank {rank} for experts that live on other ranks")
    got_keys = _keys(sr, st, ids.clamp(min=0), t, e)[used.flatten()]
    got_w = weights.flatten()[used.flatten()]

    exp_keys, exp_w = [], []
    for s, b in enumerate(sources.batches):
        sid = b.topk_ids.to(dev).long()
        mine = owner_rank(sid, e, ws) == rank
        tok = torch.arange(t, device=dev)[:, None].expand_as(sid)
        exp_keys.append(((s * t + tok) * e + sid)[mine])
        exp_w.append(b.topk_weights.to(dev).float()[mine])
    want_keys, want_w = torch.cat(exp_keys), torch.cat(exp_w)
    got_sorted, gi = torch.sort(got_keys)
    want_sorted, wi = torch.sort(want_keys)
    missing = int((~torch.isin(want_sorted, got_sorted)).sum())
    unexpected = int((~torch.isin(got_sorted, want_sorted)).sum())
    dup = int(got_sorted.numel() - torch.unique(got_sorted).numel())
    v.figures.update(
        expected_pairs=float(want_sorted.numel()),
        received_pairs=float(got_sorted.numel()),
        missing_pairs=float(missing),
        unexpected_pairs=float(unexpected),
        duplicate_pairs=float(dup),
    )
    if missing or unexpected or dup or got_sorted.numel() != want_sorted.numel():
        v.fail(
            f"expected {want_sorted.numel()} (token, expert) pairs and received "
            f"{got_sorted.numel()}: {missing} missing, {unexpected} unexpected, {dup} duplicated"
        )
    elif not torch.equal(got_w[gi], want_w[wi]):
        bad = int((got_w[gi] != want_w[wi]).sum())
        v.figures["weight_mismatches"] = float(bad)
        v.fail(f"{bad} routing weights changed in transit")

    flat = sr * t + st
    bad_rows = torch.zeros(flat.numel(), dtype=torch.bool, device=dev)
    for pi in range(len(d.payload.parts)):
        sent = torch.cat([as_bytes(b.payload.parts[pi].to(dev)) for b in sources.batches])
        got = as_bytes(d.payload.parts[pi].to(dev)[rows])
        if got.shape[1] != sent.shape[1]:
            v.fail(f"payload part {pi} arrived with {got.shape[1]} bytes per row; {sent.shape[1]} were sent")
            return
        bad_rows |= (got != sent.index_select(0, flat)).any(dim=1)
    nbad = int(bad_rows.sum())
    v.figures["content_mismatch_rows"] = float(nbad)
    if nbad:
        v.fail(f"{nbad} of {flat.numel()} received rows differ from the bytes their source rank sent")


def verify_combine(out: torch.Tensor, batch: LocalBatch, spec: All2AllSpec, v: Verdict) -> None:
    """This rank's combined output against dequant(x) * sum(weights)."""
    t, h = batch.num_tokens, spec.hidden_size
    if tuple(out.shape) != (t, h):
        v.fail(f"combine returned shape {tuple(out.shape)}; expected ({t}, {h})")
        return
    ref = dequantize(batch.payload).to(out.device) * batch.topk_weights.to(out.device).float().sum(1, keepdim=True)
    got = out.float()
    err = (got - ref).abs()
    tol = (spec.topk + 1) * BF16_UNIT * ref.abs() + 1e-6
    bad = (err > tol) | ~torch.isfinite(got)
    scale = float(ref.abs().max()) if ref.numel() else 1.0
    finite_err = torch.where(torch.isfinite(err), err, torch.full_like(err, float("inf")))
    max_abs = float(finite_err.max()) if err.numel() else 0.0
    rel = finite_err / (ref.abs() + 1e-3 * max(scale, 1e-6))
    v.figures.update(
        max_abs_err=max_abs,
        max_rel_err=float(rel.max()) if rel.numel() else 0.0,
        mismatched_elements=float(bad.sum()),
        mismatch_fraction=float(bad.float().mean()),
    )
    nbad = int(bad.sum())
    if nbad:
        tokens_bad = int(bad.any(dim=1).sum())
        v.fail(
            f"combine(dispatch(x)) differs from x times its routing-weight sum on {tokens_bad} of {t} tokens "
            f"(max abs error {max_abs:.4g}, tolerance (top-k + 1) * 2^-8 relative)"
        )


def check_round(
    candidate: Any, ctx: RankContext, spec: All2AllSpec, sources: Sources
) -> tuple[Verdict, Dispatched, torch.Tensor]:
    """One dispatch -> identity experts -> combine round on this rank, verified. Returns the verdict, the
    dispatched rows and the expert output (reused, unchanged, as the combine input when timing)."""
    v = Verdict(rank=ctx.rank)
    batch = sources.batches[ctx.rank]
    d = candidate.dispatch(batch, verify=True)
    verify_dispatch(d, sources, spec, ctx.rank, v)
    expert_out = identity_expert(d)
    out = candidate.combine(d, expert_out)
    verify_combine(out, batch, spec, v)
    return v, d, expert_out


def agree(ctx: RankContext, v: Verdict) -> tuple[bool, str, dict[str, float]]:
    """Gather every rank's verdict; all ranks return the same (passed, message, worst figures)."""
    verdicts = ctx.all_gather_object({"rank": v.rank, "passed": v.passed, "reasons": v.reasons, "figures": v.figures})
    failed = [x for x in verdicts if not x["passed"]]
    figures: dict[str, float] = {}
    for x in verdicts:
        for k, val in x["figures"].items():
            figures[k] = max(figures.get(k, float("-inf")), float(val))
    if not failed:
        return True, "", figures
    msg = "; ".join(f"rank {x['rank']}: " + "; ".join(x["reasons"]) for x in failed)
    agreeing = [x["rank"] for x in verdicts if x["passed"]]
    if agreeing:
        who = "rank" if len(agreeing) == 1 else "ranks"
        msg += f" ({who} {', '.join(map(str, agreeing))} saw correct results; any disagreeing rank fails the trial)"
    return False, msg, figures
