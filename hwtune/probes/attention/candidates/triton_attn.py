"""HWTUNE_TRITON_ATTN: hwtune's own paged attention kernels (``hwtune.kernels.triton_attention``).

Tactic ``auto`` runs the heuristic config; ``tuned`` searches the config space on this very workload when
first planned (each config's output must match the auto config's before it may be timed, and the search
time counts as compile time), then runs the fastest. A prefill with few query tiles gets a second round: the first
round's fastest configs of two distinct tiles with other KV split counts. The chosen config's name is kept in the
record.
"""

from __future__ import annotations

import dataclasses

import torch

from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.candidates.base import Candidate, Runner, Unsupported, triton_gpu_unavailable
from hwtune.probes.attention.problem import AttentionProblem

#: First-round finalists of a prefill search whose KV split counts the second round tries.
REFINED_FINALISTS = 2


def _kernels():  # noqa: ANN202 - module
    from hwtune.kernels import configs, triton_attention

    return configs, triton_attention


class TritonAttnRunner(Runner):
    """Wraps hwtune's ``kernels.triton_attention.paged_attention``; the config (heuristic for ``auto``, searched on
    this workload for ``tuned``) is fixed at the first prepare so a captured graph keeps its launch."""

    returns_lse = True
    supports_graphs = True

    def __init__(self, tactic: str) -> None:
        super().__init__()
        self.tactic = tactic
        self.configs, self.kernels = _kernels()
        self.config = None
        self.problem: AttentionProblem | None = None
        self.workspace: torch.Tensor | None = None
        self.extra: dict[str, object] = {}

    def _workspace(self, p: AttentionProblem, configs: list) -> torch.Tensor | None:
        """One zeroed split-KV scratch for every one of ``configs`` (the kernel keeps its merge counters at zero in
        it), allocated once: a call given none would zero a fresh one inside every timed launch."""
        size = max(
            self.configs.workspace_size(
                num_tokens=p.q.shape[0],
                num_heads=p.q.shape[1],
                head_size=p.q.shape[2],
                num_splits=cfg.num_splits or 1,
            )  # fmt: skip
            for cfg in configs
        )
        return torch.zeros(size, dtype=torch.float32, device=p.q.device) if size else None

    def _call(self, p: AttentionProblem, config: object, out: torch.Tensor, lse: torch.Tensor | None) -> None:
        self.kernels.paged_attention(
            p.q,
            p.k_cache(),
            p.v_cache(),
            p.block_table,
            p.seq_lens,
            p.query_start_loc,
            max_query_len=p.max_query_len,
            max_seq_len=p.max_seq_len,
            out=out,
            lse=lse,
            softmax_scale=p.softmax_scale,
            kv_layout=p.layout,
            k_scale=p.k_scale,
            v_scale=p.v_scale,
            config=config,
            workspace=self.workspace,
        )

    def _shape_args(self, p: AttentionProblem) -> dict[str, object]:
        spec = p.spec
        return dict(
            phase=p.workload.phase,
            batch=p.batch,
            max_query_len=p.max_query_len,
            max_seq_len=p.max_seq_len,
            head_size=spec.head_size,
            gqa_group=spec.gqa_group,
            num_sms=torch.cuda.get_device_properties(p.q.device).multi_processor_count,
            num_kv_heads=spec.num_kv_heads,
            kv_cache_bytes=p.k_cache().element_size(),
        )

    def prepare(self, p: AttentionProblem) -> None:
        self._alloc(p, lse=True)
        self.problem = p
        if self.config is not None:  # fixed at the first batch: a captured graph keeps its launch
            return
        if self.tactic == "auto":
            self.config = self.configs.default_config(**self._shape_args(p))
            self.workspace = self._workspace(p, [self.config])
        else:
            self.config = self._search(p)
            self.workspace = self._workspace(p, [self.config])  # sized for the chosen config, not the search's largest
        self.extra["config"] = self.config.name()

    def _search(self, p: AttentionProblem) -> object:
        """The fastest config of the space under the probe's own timing (``config_search.fastest_config``), then, for a
        prefill with few query tiles, a second round: the first round's fastest configs of ``REFINED_FINALISTS``
        distinct tiles with other KV split counts (``configs.prefill_split_refinements``), beside auto (the reference
        every output must match) and the first round's winner."""
        from hwtune.probes.attention.candidates.config_search import fastest_config

        assert self.out is not None
        shape = self._shape_args(p)
        space = self.configs.config_space(**shape)
        self.workspace = self._workspace(p, space)
        # the search launches what run() launches (the LSE written too: without it the kernel is another compiled
        # variant, which on an H100 ran one-split decode configs 10-12 % faster than run() then did)
        best, seen = fastest_config(space, lambda cfg, out: self._call(p, cfg, out, self.lse), self.out)
        self.extra.update(seen)
        more = self._refinements(space, seen, shape)
        if not more:
            return best
        second = list(dict.fromkeys([space[0], best, *more]))  # auto first: the reference and the incumbent
        self.workspace = self._workspace(p, second)
        best, refined = fastest_config(second, lambda cfg, out: self._call(p, cfg, out, self.lse), self.out)
        self.extra["refined_us"] = refined["searched_us"]
        self.extra["searched"] = int(seen["searched"]) + len(more)
        self.extra["rejected_configs"] = [*seen["rejected_configs"], *refined["rejected_configs"]]
        return best

    def _refinements(self, space: list, seen: dict[str, object], shape: dict[str, object]) -> list:
        """Second-round configs of a prefill (none for a decode): the split variants of the first round's fastest
        timed configs (``seen["searched_us"]``) of ``REFINED_FINALISTS`` distinct tiles (a tile: a config but for its
        split count), none of them a config the first round searched."""
        if self.configs.is_decode_shape(shape["max_query_len"]):
            return []
        timed_us = seen["searched_us"]
        by_name = {cfg.name(): cfg for cfg in space}
        tiles: dict[object, object] = {}
        for name in sorted(timed_us, key=timed_us.__getitem__):
            tiles.setdefault(dataclasses.replace(by_name[name], num_splits=None), by_name[name])
        args = {k: v for k, v in shape.items() if k not in ("phase", "head_size", "kv_cache_bytes")}
        finalists = list(tiles.values())[:REFINED_FINALISTS]
        more = [c for cfg in finalists for c in self.configs.prefill_split_refinements(cfg, **args)]
        return [c for c in dict.fromkeys(more) if c not in by_name.values()]

    def run(self) -> None:
        p = self.problem
        assert p is not None and self.out is not None
        self._call(p, self.config, self.out, self.lse)


class TritonAttnCandidate(Candidate):
    """TRITON_ATTN's tactics ``auto`` and ``tuned``; needs a CUDA device visible to torch."""

    backend = "HWTUNE_TRITON_ATTN"

    def unavailable(self, workload: AttentionWorkload, tactic: str, device: str) -> str | None:
        return triton_gpu_unavailable(device)

    def runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        if tactic not in ("auto", "tuned"):
            raise Unsupported(f"TRITON_ATTN has no tactic {tactic!r}")
        if workload.spec.sinks:
            raise Unsupported("hwtune's Triton attention kernel does not apply attention sinks")
        return TritonAttnRunner(tactic)
