"""One rank of a trial: ``python -m hwtune.probes.all2all.worker SPEC.json OUTDIR RANK``.

Joins the trial's process group (NCCL on CUDA with one GPU per rank, gloo on CPU; rendezvous on
``tcp://127.0.0.1:PORT``), builds the candidate once, then for each workload: correctness first (two
rounds with different inputs, the second catching stale state), verdicts agreed across ranks, timing only
if every rank passed. Progress and results go to ``OUTDIR/rank{R}.jsonl`` as JSON lines.

Any exception ends this rank: it writes what happened for the current workload and exits with code 3,
because its peers may be blocked in a collective it will never join; the parent then kills the group and
starts a fresh one for the remaining workloads.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

from hwtune.probes.all2all.trial import EXIT_REPORTED, ItemResult, TrialSpec, write_line


class _Out:
    def __init__(self, out_dir: Path, rank: int) -> None:
        self.path = out_dir / f"rank{rank}.jsonl"

    def event(self, name: str, **kw: Any) -> None:
        write_line(self.path, {"event": name, "t": time.time(), **kw})

    def result(self, index: int, res: ItemResult) -> None:
        self.event("result", i=index, **res.to_dict())


def _classify(exc: BaseException, stage: str) -> ItemResult:
    from hwtune.probes.all2all.candidates.base import CapacityExceeded
    from hwtune.probes.all2all.payload import PayloadShapeError
    from hwtune.probes.contract import Unsupported

    tail = traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:]
    extra = {"stage": stage, "traceback_tail": "".join(tail)[-3000:]}
    if isinstance(exc, (Unsupported, PayloadShapeError)):
        return ItemResult("unsupported", str(exc), extra=extra)
    if isinstance(exc, CapacityExceeded):
        return ItemResult("error", str(exc), extra=extra)
    return ItemResult("error", f"{stage} raised {type(exc).__name__}: {exc}", extra=extra)


def _init(spec: TrialSpec, rank: int) -> Any:
    import torch
    import torch.distributed as dist

    from hwtune.probes.all2all.candidates.base import RankContext

    timeout = timedelta(seconds=spec.pg_timeout_s)
    url = f"tcp://127.0.0.1:{spec.master_port}"
    if spec.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group(
            "nccl", init_method=url, rank=rank, world_size=spec.world_size, timeout=timeout, device_id=device
        )
        cpu_group = dist.new_group(backend="gloo", timeout=timeout)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method=url, rank=rank, world_size=spec.world_size, timeout=timeout)
        cpu_group = dist.group.WORLD
    # Leave the rendezvous together: a rank that finished it early could fail its set-up and exit while a
    # slower peer still talks to the store rank 0 hosts, and that peer would fail its start-up instead.
    dist.barrier(group=cpu_group)
    return RankContext(
        rank=rank, world_size=spec.world_size, device=device, group=dist.group.WORLD, cpu_group=cpu_group
    )


def _check_rounds(cand: Any, ctx: Any, spec: TrialSpec, a2a: Any, item: Any) -> tuple[bool, str, dict, Any, Any]:
    """Correctness on two different batches (the second catches stale state), agreed across ranks: (passed,
    message, worst figures, the last round's sources, its expert outputs)."""
    from hwtune.probes.all2all import correctness as C

    figures: dict[str, float] = {}
    sources = expert_out = None
    for round_seed in (spec.seed, spec.seed + 1):
        sources = C.build_sources(a2a, item.tokens_per_rank, item.routing, seed=round_seed, device=ctx.device)
        verdict, _, expert_out = C.check_round(cand, ctx, a2a, sources)
        ok, msg, figs = C.agree(ctx, verdict)
        figures = {k: max(v, figures.get(k, v)) for k, v in figs.items()}
        if not ok:
            return False, f"round with seed {round_seed}: {msg}", figures, sources, expert_out
    return True, "", figures, sources, expert_out


def _throughput(a2a: Any, ids: list[Any], tm: Any, median_us: float, peak_gbps: float | None) -> dict[str, Any]:
    """Per-half medians and useful bytes moved: each token once to each other rank holding one of its
    experts (payload out, bf16 back), as achieved GB/s and, where the peak is known, its fraction."""
    from hwtune.core.records import LatencyStats
    from hwtune.probes.all2all.payload import bytes_per_token
    from hwtune.probes.all2all.routing import remote_token_targets

    payload_b = bytes_per_token(a2a.quant_dtype, a2a.hidden_size)
    remote = [remote_token_targets(t, a2a.num_experts, a2a.ep_size, r) for r, t in enumerate(ids)]
    useful = [n * (payload_b + 2 * a2a.hidden_size) for n in remote]
    mean_useful = sum(useful) / len(useful)
    achieved = mean_useful / (median_us * 1e-6) / 1e9 if median_us > 0 else None
    out: dict[str, Any] = dict(
        dispatch_median_us=LatencyStats.from_samples(tm.dispatch_us).median_us,
        combine_median_us=LatencyStats.from_samples(tm.combine_us).median_us,
        payload_bytes_per_token=payload_b,
        useful_bytes_per_rank=mean_useful,
        max_useful_bytes_per_rank=max(useful),
        achieved_gbps=achieved,
    )
    if peak_gbps and achieved is not None:
        out.update(peak_gbps=peak_gbps, fraction_of_peak=achieved / peak_gbps)
    return out


def _run_item(cand: Any, ctx: Any, spec: TrialSpec, index: int, setup_s: float) -> ItemResult:
    """One workload on this rank: correctness first (agreed by all ranks), then timing."""
    from hwtune.core import catalogue
    from hwtune.core.catalogue import Feature
    from hwtune.core.records import LatencyStats
    from hwtune.core.types import All2AllSpec
    from hwtune.probes.all2all.routing import receive_load
    from hwtune.probes.all2all.timing import median_ci95_rel, time_candidate

    a2a = All2AllSpec.from_dict(spec.spec)
    item = spec.items[index]
    extra: dict[str, Any] = {
        "tokens_per_rank": item.tokens_per_rank,
        "routing": item.routing,
        "world_size": ctx.world_size,
        "seed": spec.seed,
        "setup_s": setup_s,
    }
    passed, message, figures, sources, expert_out = _check_rounds(cand, ctx, spec, a2a, item)
    ids = [b.topk_ids for b in sources.batches]
    extra["receive_load_pairs"] = receive_load(ids, a2a.num_experts, a2a.ep_size)
    if not passed:
        return ItemResult("wrong_answer", message, error=figures, compile_time_s=setup_s, extra=extra)
    tm = time_candidate(
        cand,
        ctx,
        sources.batches[ctx.rank],
        expert_out,
        time_cap_s=spec.time_cap_s,
        warmup=spec.warmup_iters,
        min_iters=spec.min_iters,
        max_iters=spec.max_iters,
        use_graphs=spec.use_cuda_graphs,
        declared_graph_safe=catalogue.get("all2all", spec.backend).has(Feature.CUDA_GRAPHS),
    )
    stats = LatencyStats.from_samples(tm.total_us, ci95_rel=median_ci95_rel(tm.total_us))
    extra.update(_throughput(a2a, ids, tm, stats.median_us, spec.peak_gbps))
    extra.update(iterations=stats.n, warmup_iterations=tm.warmup, notes=tm.notes, correctness=figures)
    return ItemResult(
        "ok",
        "",
        stats=dataclasses.asdict(stats),
        error=figures,
        timing_method=tm.method,
        compile_time_s=setup_s,
        extra=extra,
    )


def _peak(ctx: Any, spec: TrialSpec) -> ItemResult:
    from hwtune.probes.all2all.peak import measure_peak

    return measure_peak(ctx, spec)


def main(argv: list[str]) -> int:
    """One rank of a trial (argv: spec path, output dir, rank): every outcome, crash included, is written as a JSON
    line, then the process exits with ``os._exit`` so teardown cannot hang on peers that already left."""
    spec_path, out_dir, rank = Path(argv[0]), Path(argv[1]), int(argv[2])
    faulthandler.enable()  # a segfault leaves its Python stack in this rank's stderr
    spec = TrialSpec.from_json(spec_path.read_text())
    out = _Out(out_dir, rank)
    index, stage = 0, "start-up (process-group rendezvous)"
    try:
        ctx = _init(spec, rank)
        out.event("ready")
        if spec.mode == "peak":
            stage = "peak measurement"
            out.event("begin", i=0)
            out.result(0, _peak(ctx, spec))
        else:
            from hwtune.core.types import All2AllSpec
            from hwtune.probes.registry import load_class

            stage = "the candidate's set-up"
            t0 = time.perf_counter()
            cls = load_class(spec.candidate_ref)
            cand = cls(
                ctx=ctx,
                spec=All2AllSpec.from_dict(spec.spec),
                max_tokens=max(i.tokens_per_rank for i in spec.items),
                options=dict(spec.options),
            )
            setup_s = time.perf_counter() - t0
            out.event("setup_ok", seconds=setup_s)
            for index in range(len(spec.items)):
                item = spec.items[index]
                stage = f"workload {index} ({item.tokens_per_rank} tokens per rank, {item.routing} routing)"
                out.event("begin", i=index)
                out.result(index, _run_item(cand, ctx, spec, index, setup_s))
        import torch.distributed as dist

        dist.barrier(group=ctx.cpu_group)
        out.event("done")
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent as a result line
        res = _classify(exc, stage)
        res.extra["rank"] = rank
        out.result(index, res)
        sys.stderr.flush()
        os._exit(EXIT_REPORTED)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip process-group teardown: it can block on peers that already left


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
