"""What the MLA candidates share: their output is the latent ``[tokens, heads, kv_lora_rank]`` (V is the ckv part
of the cache), and each checks that it is handed an MLA problem (``hwtune.probes.attention.mla``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hwtune.probes.attention.candidates.base import Runner

if TYPE_CHECKING:
    from hwtune.probes.attention.mla import MlaProblem
    from hwtune.probes.attention.problem import AttentionProblem


def as_mla(problem: AttentionProblem) -> MlaProblem:
    """``problem`` itself, refused unless it is an MLA problem (a latent cache and absorbed queries)."""
    if not getattr(problem, "is_mla", False):
        raise TypeError("an MLA candidate needs an MLA problem (spec.use_mla): a latent cache and absorbed queries")
    return problem  # type: ignore[return-value]


class MlaRunner(Runner):
    """A ``Runner`` whose ``out`` is the latent output ``[tokens, heads, kv_lora_rank]`` in the query's dtype."""

    def _alloc(self, problem: AttentionProblem, lse: bool) -> None:
        """Allocate out/lse once for the latent width; later problems must have the same token count (graph
        safety), as ``Runner._alloc``."""
        import torch

        p = as_mla(problem)
        assert p.dims is not None
        shape = (p.num_tokens, p.spec.num_heads, p.dims.lora)
        if self.out is None or tuple(self.out.shape) != shape:
            self.out = torch.empty(shape, dtype=p.q.dtype, device=p.q.device)
            self.lse = torch.empty(shape[:2], dtype=torch.float32, device=p.q.device) if lse else None
