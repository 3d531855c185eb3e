"""One measurement, inside the worker process: correctness gate first, then timing.

Order, as the design's measurement protocol says:
1. build batch A and its float32 reference; plan the runner; first call (JIT compile time recorded apart);
2. NaN-fill the outputs, run, compare (and the LSE where returned) -> wrong_answer stops here;
3. DCP: in decode, split each request's KV into two page-aligned halves, run each, merge by LSE, compare
   with A; a DCP prefill runs the DCP prefill path itself (dcp.py: every virtual rank's share of the cached
   prefix, the ragged new tokens, merged by LSE), so batch A's check is that path's check;
4. capture a CUDA graph where the runner supports it and check a replay;
5. a second, different batch B written into the same buffers, re-planned, run through the same
   plan/graph and compared (stale metadata);
6. restore A and time it (graph replay or CUDA events; wall clock on CPU).
An MLA spec builds an ``MlaProblem`` (latent cache, absorbed queries; ``mla.py``) and its checks compare the
candidate's latent output after the reference's ``W_UV`` projection (``correctness.compare_latent``); a runner of
MLA's non-absorbed prefill (``latent_output = False``, ``candidates/mla_prefill_base.py``) writes the heads' output
``[tokens, heads, v_head_dim]``, compared with the same reference directly.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from hwtune.core import catalogue
from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.candidates.base import Runner, Unsupported, load_candidate
from hwtune.probes.attention.correctness import Verdict, compare, compare_latent, tolerances
from hwtune.probes.attention.dcp import DcpPrefillRunner
from hwtune.probes.attention.problem import build_problem, second_batch_lengths, split_halves
from hwtune.probes.attention.reference import merge_by_lse, reference_attention
from hwtune.probes.timing import TimingOptions, capture_graph, time_cpu, time_cuda


class WrongAnswer(Exception):
    """A correctness-gate failure inside a job, carrying the error figures so the record keeps the evidence."""

    def __init__(self, message: str, figures: dict[str, float]) -> None:
        super().__init__(message)
        self.figures = figures


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _fill_nan(runner: Runner) -> None:
    assert runner.out is not None
    runner.out.fill_(math.nan)
    if runner.lse is not None:
        runner.lse.fill_(math.nan)


def _verdict(
    problem: Any,
    out: torch.Tensor,
    lse: torch.Tensor | None,
    ref: tuple[torch.Tensor, torch.Tensor],
    tol: tuple[float, float],
    latent: bool = True,
) -> Verdict:
    """Compare an output (and LSE) with the reference: an MLA problem's latent output after its W_UV projection,
    unless the runner writes the heads' output itself (``latent_output = False``: MLA's non-absorbed prefill)."""
    kw = dict(rel_tol=tol[0], lse=lse, ref_lse=ref[1] if lse is not None else None, lse_tol=tol[1])
    if getattr(problem, "is_mla", False) and latent:
        return compare_latent(out, ref[0], project=problem.project, **kw)
    return compare(out, ref[0], **kw)


def _check(
    runner: Runner, problem: Any, ref: tuple[torch.Tensor, torch.Tensor], tol: tuple[float, float], label: str
) -> Verdict:
    assert runner.out is not None
    lse = runner.lse_natural() if runner.returns_lse else None
    verdict = _verdict(problem, runner.out, lse, ref, tol, getattr(runner, "latent_output", True))
    if not verdict.ok:
        raise WrongAnswer(verdict.message(label), {f"{label}.{k}": v for k, v in verdict.figures.items()})
    return verdict


def _dcp_check(
    workload: AttentionWorkload,
    candidate: Any,
    tactic: str,
    device: str,
    problem: Any,
    ref: tuple[torch.Tensor, torch.Tensor],
    tol: tuple[float, float],
) -> dict[str, float]:
    try:
        half_a, half_b = split_halves(problem)
    except ValueError as exc:  # too short a context to split over two ranks: cannot be checked
        raise Unsupported(f"DCP check: {exc}") from None
    parts = []
    for half in (half_a, half_b):
        runner = candidate.runner(workload, tactic, device)
        if not half.causal and not runner.supports_non_causal:
            raise Unsupported(
                "the DCP check with several query tokens per request needs a share of the KV attended without a "
                "causal mask, which hwtune's runner of this backend cannot do; not measured rather than unchecked"
            )
        runner.prepare(half)
        _fill_nan(runner)
        runner.run()
        _sync(device)
        lse = runner.lse_natural() if runner.returns_lse else None
        if lse is None:
            raise WrongAnswer("DCP needs the softmax LSE, but this runner returned none", {})
        parts.append((runner.out.clone(), lse.clone()))
    out, lse = merge_by_lse(parts[0][0], parts[0][1], parts[1][0], parts[1][1])
    verdict = _verdict(problem, out, lse, ref, tol, getattr(runner, "latent_output", True))
    if not verdict.ok:
        raise WrongAnswer(
            verdict.message("DCP split-and-merge by LSE"), {f"dcp.{k}": v for k, v in verdict.figures.items()}
        )
    return {f"dcp.{k}": v for k, v in verdict.figures.items()}


# Fail closed: a compiled function past its recompile limit raises instead of silently running eager
# (which would be timed and stored as the backend's speed); the record then says what happened.
if hasattr(torch._dynamo.config, "fail_on_recompile_limit_hit"):
    torch._dynamo.config.fail_on_recompile_limit_hit = True


#: (backend, spec key) of the last job that compiled with dynamic shapes in this worker (``_forget_compiled_shapes``).
_DYNAMIC_LAST: dict[str, str] = {}


def _forget_compiled_shapes(backend: str, spec_key: str, device: str) -> None:
    """Give a backend compiled per shape (torch.compile) a clean compiler where it would otherwise pile up graphs.
    A long-lived worker accumulates one compiled graph per shape, and past ``torch._dynamo.config.recompile_limit``
    (8) dynamo silently ran the eager, unfused function: a tune then stored FLEX_ATTENTION decode at 15-100x what
    `bench` measured. On the CPU (one compile per shape) every job starts clean; compiled code stays in inductor's
    disk cache, so a shape seen before recompiles in about a second. On CUDA the backend compiles with dynamic shapes
    (FLEX_ATTENTION's ``_flex``): one graph serves every shape of a spec, so the compiler is reset only when the spec
    changes (on an H100 the later shapes of a spec took 0-0.02 s each without a reset, against about 1 s, and 4-22 s
    inside a tune, with one; benchmarks/results/flex_dynamic_h100_2026-11-27.log)."""
    record = catalogue.find(backend)
    if record is None or not record.compile_per_shape:
        return
    if device == "cuda":
        if _DYNAMIC_LAST.get(backend) == spec_key:
            return
        _DYNAMIC_LAST[backend] = spec_key
    torch._dynamo.reset()


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Measure one (workload, backend, tactic); returns the result fields of a MeasurementRecord."""
    device = job.get("device", "cuda")
    workload = AttentionWorkload.from_dict(job["workload"])
    backend, tactic = job["backend"], job["tactic"]
    opts = TimingOptions(**job.get("timing", {}))
    seed = int(job.get("seed", 0))
    _forget_compiled_shapes(backend, workload.spec.key(), device)
    try:
        candidate = load_candidate(backend, job.get("candidate"))
        reason = candidate.unavailable(workload, tactic, device)
        if reason:
            return {"status": "unsupported", "message": reason}
        return _measure(job, workload, candidate, backend, tactic, device, opts, seed)
    except Unsupported as exc:
        return {"status": "unsupported", "message": str(exc)}
    except WrongAnswer as exc:
        return {"status": "wrong_answer", "message": str(exc), "error": exc.figures}
    except torch.cuda.OutOfMemoryError as exc:
        return {"status": "error", "message": f"out of GPU memory: {str(exc).splitlines()[0]}"}


def _second_batch(
    workload: AttentionWorkload, runner: Runner, problem: Any, device: str, seed: int, figures: dict[str, float]
) -> Any:
    """Batch B, of other lengths (and, in a mixed batch, other query lengths per position), written into batch
    A's buffers and planned on the same runner."""
    lengths = second_batch_lengths(workload, seed + 1)
    second = build_problem(workload, device, seed=seed + 1, like=problem, lengths=lengths)
    try:
        runner.prepare(second)
    except Unsupported:  # e.g. SDPA's flash kernel: no ragged batches; check with a uniform one
        figures["batch B uniform"] = 1.0
        lengths = second_batch_lengths(workload, seed + 1, uniform=True)
        second = build_problem(workload, device, seed=seed + 1, like=problem, lengths=lengths)
        runner.prepare(second)
    return second


def _gate(
    workload: AttentionWorkload,
    candidate: Any,
    tactic: str,
    runner: Runner,
    problem: Any,
    device: str,
    opts: TimingOptions,
    seed: int,
) -> tuple[dict[str, float], float, Any]:
    """The correctness gate (module docstring, steps 1-5): raises WrongAnswer; returns the error figures,
    the first call's time (JIT included) and the captured graph (None without graphs)."""
    spec = workload.spec
    tol = tolerances(spec.dtype, spec.kv_cache_dtype)
    t0 = time.perf_counter()
    runner.prepare(problem)
    plan_s = time.perf_counter() - t0
    ref = reference_attention(runner.reference_problem(problem))
    _fill_nan(runner)
    t1 = time.perf_counter()
    runner.run()
    _sync(device)
    compile_s = plan_s + time.perf_counter() - t1  # first plan + first call: JIT compilation included
    figures = dict(_check(runner, problem, ref, tol, "batch A").figures)
    if spec.dcp_size > 1 and workload.phase == "decode":
        figures.update(_dcp_check(workload, candidate, tactic, device, problem, ref, tol))
    graph = None
    if device == "cuda" and opts.use_graphs and runner.supports_graphs:
        graph = capture_graph(runner.run)
        _fill_nan(runner)
        graph.replay()
        _sync(device)
        _check(runner, problem, ref, tol, "batch A (graph replay)")
    second = _second_batch(workload, runner, problem, device, seed, figures)
    ref_b = reference_attention(runner.reference_problem(second))
    _fill_nan(runner)
    (graph.replay if graph is not None else runner.run)()
    _sync(device)
    _check(runner, second, ref_b, tol, "batch B through the same plan" + (" and graph" if graph else ""))
    return figures, compile_s, graph


def _runner(workload: AttentionWorkload, candidate: Any, tactic: str, device: str) -> Runner:
    """The runner the engine's computation needs: with DCP, a prefill is the DCP prefill path (dcp.py)."""
    if workload.spec.dcp_size > 1 and workload.phase == "prefill":
        return candidate.dcp_prefill_runner(workload, tactic, device)
    if workload.spec.dcp_size > 1 and workload.phase == "mixed":
        raise Unsupported("hwtune's gate has no DCP check for mixed batches; not measured rather than unchecked")
    return candidate.runner(workload, tactic, device)


def _measure(
    job: dict[str, Any],
    workload: AttentionWorkload,
    candidate: Any,
    backend: str,
    tactic: str,
    device: str,
    opts: TimingOptions,
    seed: int,
) -> dict[str, Any]:
    problem = build_problem(workload, device, seed=seed)
    runner = _runner(workload, candidate, tactic, device)
    figures, compile_s, graph = _gate(workload, candidate, tactic, runner, problem, device, opts, seed)
    problem = build_problem(workload, device, seed=seed, like=problem)  # restore batch A in place
    runner.prepare(problem)
    extra = dict(getattr(runner, "extra", {}))
    if isinstance(runner, DcpPrefillRunner):  # all virtual ranks were checked; one rank's work is timed
        runner.ranks = (0,)
        extra["dcp_prefill"] = f"timed: rank 0 of {workload.spec.dcp_size} (its prefix share, new tokens, merges)"
    if device == "cuda":
        l2 = int(job.get("l2_bytes") or torch.cuda.get_device_properties(0).L2_cache_size)
        stats, method = time_cuda(runner.run, l2_bytes=l2, opts=opts, graph=graph, report=extra)
    else:
        stats, method = time_cpu(runner.run, opts)
    return {
        "status": "ok",
        "message": "",
        "stats": vars(stats),
        "error": figures,
        "timing_method": method,
        "compile_time_s": compile_s,
        "extra": {
            "graph": graph is not None,
            "layout": problem.layout,
            "num_tokens": problem.num_tokens,
            **extra,
        },
    }
