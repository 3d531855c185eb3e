"""Top-k expert routing for the all2all harness: uniform or skewed (hot experts), deterministic per seed.

Every rank must be able to regenerate every other rank's tokens and routing from ``(seed, rank)`` alone:
that is how a receiving rank checks, without trusting the candidate under test, that exactly the right
tokens reached exactly the right experts. So inputs come from a seeded ``torch.Generator`` on the rank's
own device type (the same device model gives the same numbers).

Experts are placed contiguously, as vLLM's expert map and FlashInfer's kernels place them: expert ``e``
lives on rank ``e // (num_experts / ep_size)``.

Skewed routing draws experts without replacement with Zipf probabilities ``p_e ~ 1 / (e + 1) ** s`` (the
Gumbel-top-k trick keeps it vectorised). The hottest experts have the lowest ids, so they all live on rank
0: the worst case for an all2all, where one rank receives far more than its share.

Routing weights are drawn in [0.5, 1.0) and are *not* normalised, so a dropped or duplicated expert
contribution changes a token's weight sum by at least 1/(2 top-k), well above the bf16 tolerance of the
combine check.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Zipf exponent of skewed routing.
SKEW_EXPONENT = 1.2
ROUTINGS = ("uniform", "skewed")


@dataclass(frozen=True)
class Routing:
    """One rank's routing: ``topk_ids`` int32 [T, k] (distinct per token) and ``topk_weights`` fp32 [T, k]."""

    topk_ids: torch.Tensor
    topk_weights: torch.Tensor

    @property
    def num_tokens(self) -> int:
        """Tokens routed (rows of ``topk_ids``)."""
        return int(self.topk_ids.shape[0])


def experts_per_rank(num_experts: int, ep_size: int) -> int:
    """Experts per rank under contiguous placement; refuses an ``ep_size`` that does not divide the experts."""
    if num_experts % ep_size:
        raise ValueError(f"num_experts ({num_experts}) must be divisible by ep_size ({ep_size})")
    return num_experts // ep_size


def owner_rank(expert_ids: torch.Tensor, num_experts: int, ep_size: int) -> torch.Tensor:
    """Rank that holds each expert (contiguous placement)."""
    return torch.div(expert_ids, experts_per_rank(num_experts, ep_size), rounding_mode="floor")


def generator(seed: int, rank: int, stream: int, device: torch.device) -> torch.Generator:
    """A generator for one (seed, rank, purpose) triple; distinct streams never share numbers."""
    g = torch.Generator(device=device)
    g.manual_seed((seed * 1_000_003 + rank * 7_919 + stream * 104_729) % (2**63 - 1))
    return g


def make_routing(
    num_tokens: int,
    num_experts: int,
    topk: int,
    kind: str,
    *,
    seed: int,
    rank: int,
    device: torch.device | str = "cpu",
) -> Routing:
    """Routing of ``num_tokens`` tokens of one rank; the same arguments always give the same routing."""
    if kind not in ROUTINGS:
        raise ValueError(f"unknown routing {kind!r}; known: {', '.join(ROUTINGS)}")
    if not 0 < topk <= num_experts:
        raise ValueError(f"topk must be in 1..num_experts ({num_experts}), got {topk}")
    dev = torch.device(device)
    g = generator(seed, rank, 1, dev)
    scores = torch.rand((num_tokens, num_experts), generator=g, device=dev)
    if kind == "skewed":
        # Gumbel-top-k: top-k of log p + Gumbel noise samples k experts without replacement with prob. p.
        ranks = torch.arange(1, num_experts + 1, device=dev, dtype=torch.float32)
        log_p = -SKEW_EXPONENT * torch.log(ranks)
        gumbel = -torch.log(-torch.log(scores.clamp(1e-12, 1 - 1e-7)))
        scores = log_p + gumbel
    ids = scores.topk(topk, dim=1).indices.to(torch.int32)
    w = torch.rand((num_tokens, topk), generator=generator(seed, rank, 2, dev), device=dev) * 0.5 + 0.5
    return Routing(topk_ids=ids.contiguous(), topk_weights=w.to(torch.float32).contiguous())


def make_hidden(
    num_tokens: int, hidden: int, *, seed: int, rank: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """One rank's activations, bf16 [T, H], drawn N(0, 1)."""
    dev = torch.device(device)
    x = torch.randn((num_tokens, hidden), generator=generator(seed, rank, 3, dev), device=dev)
    return x.to(torch.bfloat16)


def receive_load(topk_ids: list[torch.Tensor], num_experts: int, ep_size: int) -> list[int]:
    """(token, expert) pairs each rank receives, given every rank's top-k ids: the imbalance skew creates."""
    load = torch.zeros(ep_size, dtype=torch.int64)
    for ids in topk_ids:
        owners = owner_rank(ids.to(torch.int64).cpu(), num_experts, ep_size)
        load += torch.bincount(owners.flatten(), minlength=ep_size)
    return [int(v) for v in load]


def remote_token_targets(topk_ids: torch.Tensor, num_experts: int, ep_size: int, rank: int) -> int:
    """(token, destination rank) pairs with a destination other than ``rank``: the tokens a rank must send
    over the interconnect when each token goes once to each rank holding one of its experts."""
    owners = owner_rank(topk_ids.to(torch.int64), num_experts, ep_size)
    hit = torch.zeros((topk_ids.shape[0], ep_size), dtype=torch.bool, device=owners.device)
    hit.scatter_(1, owners, True)
    hit[:, rank] = False
    return int(hit.sum())
