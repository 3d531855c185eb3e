"""The ``tuned`` tactics' config search (HWTUNE_TRITON_ATTN, HWTUNE_TRITON_MLA): each config of a kernel's space runs
once, must match the first (auto) config's output, and is then timed the way the probe times a candidate (a captured
CUDA graph, L2 flushed before each replay, CUDA events; ``probes.timing.time_cuda``) in two rounds: a screen of a few
replays each (``SCREEN_TIMING``), then the auto config and the ``FINALISTS`` fastest of the screen again with a short
cap (``SEARCH_TIMING``), the fastest of which wins. A long prefill kernel (9 ms at 8192 tokens on a 32768 prefix) took
about 0.4 s per config with one round at ``SEARCH_TIMING``: 10 s for a space of 24.

Timing configs eagerly (``triton.testing.do_bench``) ranked them differently from the measurement that follows: on
an H100 (2026-11-27) it preferred one-kernel configs over split-KV ones whose merge kernel waited for the host's
launch, and the MLA search kept configs up to 1.4x slower than ``auto`` under the probe's graph timing (DeepSeek-V3
decode, batch 4 x context 512: 29.1 against 20.4 us).
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence, TypeVar

import torch

from hwtune.probes.timing import TimingOptions, capture_graph, time_cuda


class _Config(Protocol):
    def name(self) -> str: ...


C = TypeVar("C", bound=_Config)

#: Per finalist: a short cap is enough to rank; the chosen config is then measured in full like any candidate.
SEARCH_TIMING = TimingOptions(time_cap_s=0.05, min_reps=10, target_ci=0.02, warmup=2, warmup_ms=2.0, batch=10)
#: Per config of the space, first: a few replays, enough to tell the contenders from configs well behind.
SCREEN_TIMING = TimingOptions(time_cap_s=0.01, min_reps=3, max_reps=3, target_ci=1.0, warmup=1, warmup_ms=0.5, batch=3)
#: Configs timed again at ``SEARCH_TIMING`` besides the auto config: the fastest of the screen.
FINALISTS = 4


def fastest_config(
    space: Sequence[C],
    call: Callable[[C, torch.Tensor], None],
    like: torch.Tensor,
) -> tuple[C, dict[str, object]]:
    """The fastest config of ``space`` whose output matches ``space[0]``'s, and what the search saw: each config's
    screen median and each finalist's median (us), and every config the compiler refused or that computed something
    else (never timed).
    ``call(config, out)`` writes one config's output into ``out`` (a tensor like ``like``, on the GPU searched);
    configs are named by their ``name()``."""
    l2_bytes = torch.cuda.get_device_properties(like.device).L2_cache_size
    ref = torch.empty_like(like)
    call(space[0], ref)
    graphs, screened, rejected = {}, {}, []
    # Every config, and every captured graph, writes into this one tensor, alive until the last replay: a graph
    # replays into the addresses it captured, so a per-config output freed after its screen would be reused by
    # later allocations, and the finalists' replays would write into them.
    out = torch.empty_like(like)
    for i, cfg in enumerate(space):
        out.fill_(float("nan"))  # a config that writes nothing cannot pass as the last one's output
        try:
            call(cfg, out)
            torch.cuda.synchronize()
        except Exception as exc:  # shared memory or registers the compiler refuses: unusable
            rejected.append(f"{cfg.name()}: {type(exc).__name__}")
            continue
        if not torch.allclose(out.float(), ref.float(), rtol=2e-2, atol=2e-2):
            rejected.append(f"{cfg.name()}: output differs from the auto config")
            continue
        try:
            graphs[i] = capture_graph(lambda c=cfg, o=out: call(c, o))
        except Exception as exc:  # a launch a CUDA graph cannot hold is no use to a graph-replaying engine
            rejected.append(f"{cfg.name()}: not capturable ({type(exc).__name__})")
            continue
        stats, _ = time_cuda(lambda: None, l2_bytes=l2_bytes, opts=SCREEN_TIMING, graph=graphs[i])
        screened[i] = stats.median_us
    contenders = sorted((i for i in screened if i != 0), key=screened.__getitem__)[:FINALISTS]
    best, best_us, timed = space[0], float("inf"), {}
    for i in ([0] if 0 in screened else []) + contenders:  # auto first: it stays unless another is faster
        stats, _ = time_cuda(lambda: None, l2_bytes=l2_bytes, opts=SEARCH_TIMING, graph=graphs[i])
        timed[space[i].name()] = round(stats.median_us, 2)
        if stats.median_us < best_us:
            best, best_us = space[i], stats.median_us
    seen = {"searched": len(space), "screened_us": {space[i].name(): round(us, 2) for i, us in screened.items()}}
    return best, {**seen, "searched_us": timed, "rejected_configs": rejected}
