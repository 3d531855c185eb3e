"""``hwtune tune``: plan, measure and store; the orchestration lives in hwtune.tuner."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from hwtune.cli.common import JsonOpt, console, emit_json, guarded
from hwtune.core.errors import InvalidSpecError


def _plan(model: Optional[Path], plan_file: Optional[Path], tp: int, ep: Optional[int], max_num_seqs: int,
          max_model_len: Optional[int], kinds: list[str], quick: bool, profile: Any,
          overrides: dict[str, Any]) -> Any:
    from hwtune.tuner.plan import default_plan, plan_from_model, plan_from_toml

    if plan_file is not None and model is not None:
        raise InvalidSpecError("give --model or --plan, not both (a plan file can name its model)")
    if plan_file is not None:
        return plan_from_toml(plan_file, device=profile)
    if model is not None:
        return plan_from_model(model, tp=tp, ep=ep, max_num_seqs=max_num_seqs, max_model_len=max_model_len,
                               kinds=kinds, quick=quick, device=profile,
                               attention_overrides={k: v for k, v in overrides.items() if v is not None})
    return default_plan(quick=quick, device=profile, kinds=kinds)


def _winners_table(records: list) -> Table:
    from hwtune.tuner.report import winners

    table = Table(title="winners per workload")
    for col in ("workload", "winner", "median us", "runner-up", "margin", "failed"):
        table.add_column(col)
    for w in winners(records):
        table.add_row(w.label, f"{w.backend}/{w.tactic}", f"{w.median_us:.2f}", w.runner_up or "",
                      f"+{w.margin:.1%}" if w.margin is not None else "", str(w.failures) if w.failures else "")
    return table


@guarded
def tune(
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Hugging Face config.json to plan from."),
    plan_file: Optional[Path] = typer.Option(None, "--plan", help="TOML plan file (docs/tuning.md)."),
    tp: int = typer.Option(1, "--tp", help="Tensor parallelism the engine runs with."),
    ep: Optional[int] = typer.Option(None, "--ep", help="Expert parallelism (MoE all2all workloads)."),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs", help="Largest decode batch the engine runs."),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len", help="Longest context the engine serves."),
    kinds: str = typer.Option("attention,all2all", "--kinds", help="attention, all2all, or both."),
    backends: Optional[str] = typer.Option(None, "--backends", help="Only these backends (comma-separated)."),
    kv_cache_dtype: Optional[str] = typer.Option(None, "--kv-cache-dtype"),
    block_size: Optional[int] = typer.Option(None, "--block-size"),
    kv_layout: Optional[str] = typer.Option(None, "--kv-layout"),
    dcp: Optional[int] = typer.Option(None, "--dcp"),
    spec_tokens: Optional[int] = typer.Option(None, "--spec-tokens"),
    quick: bool = typer.Option(False, "--quick", help="A small plan (about 2 minutes on an H100, JIT included)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and its estimated time; measure nothing."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run of the same plan."),
    fresh: bool = typer.Option(False, "--fresh", help="Measure everything again even if this plan already ran."),
    budget: Optional[float] = typer.Option(None, "--budget", help="Stop after this many minutes (coarse grid first)."),
    time_cap: Optional[float] = typer.Option(None, "--time-cap", help="Seconds of timing per candidate at most."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds before a candidate is killed as hung."),
    device: str = typer.Option("auto", "--device", help="auto, cuda or cpu."),
    no_warmup: bool = typer.Option(False, "--no-warmup", help="Skip the parallel JIT warm-up."),
    lease: float = typer.Option(120.0, "--lease", help="Seconds a claimed item stays this node's without a "
                                "heartbeat; a dead node's items return to the queue after it."),
    db: Optional[str] = typer.Option(None, "--db", help="Store URL (default: HWTUNE_DATABASE_URL, else local SQLite)."),
    json_out: bool = JsonOpt,
) -> None:
    """Tune this node: every valid backend and tactic on every planned workload, results stored as measured."""
    from hwtune.core.detect import detect
    from hwtune.core.devices import CPU_PROFILE
    from hwtune.tuner.run import TuneOptions, Tuner, estimate_seconds

    kind_list = [k.strip() for k in kinds.split(",") if k.strip()]
    if not kind_list or set(kind_list) - {"attention", "all2all"}:
        raise InvalidSpecError(f"--kinds takes attention and/or all2all, not {kinds!r}")
    if budget is not None and budget <= 0:
        raise InvalidSpecError("--budget must be a positive number of minutes")
    if lease < 3:
        raise InvalidSpecError("--lease must be at least 3 seconds (the heartbeat renews it every lease/3)")
    if resume and fresh:
        raise InvalidSpecError("--resume continues a run and --fresh starts over: give one")
    if device not in ("auto", "cuda", "cpu"):
        raise InvalidSpecError(f"--device takes auto, cuda or cpu, not {device!r} (to plan for another GPU "
                               "model without it, use `hwtune select --device NAME`; tuning measures this node)")
    profile = detect()
    if device == "cuda" and not profile.is_cuda:
        raise InvalidSpecError("--device cuda: no NVIDIA GPU was found on this node (NVML saw none); "
                               "run on the GPU node, or use --device cpu to exercise the pipeline on the CPU")
    if device == "cpu" or (device == "auto" and not profile.is_cuda):
        profile = CPU_PROFILE
    overrides = dict(kv_cache_dtype=kv_cache_dtype, block_size=block_size, kv_layout=kv_layout, dcp_size=dcp,
                     spec_tokens=spec_tokens)
    plan = _plan(model, plan_file, tp, ep, max_num_seqs, max_model_len, kind_list, quick, profile, overrides)
    backend_list = tuple(b.strip() for b in backends.split(",")) if backends else None
    if backend_list:
        from hwtune.core import catalogue

        for b in backend_list:
            catalogue.get_any(b.partition(":")[0])  # unknown: exit 2, listing the known names
    if dry_run:
        est = estimate_seconds(plan, profile, backend_list)
        if json_out:
            emit_json({"plan": plan.to_dict(), "estimated_seconds": est, "device": profile.describe()})
            return
        console.print(f"plan {plan.name!r} ({plan.digest()}): {len(plan.items)} workloads on {profile.describe()}, "
                      f"estimated {est / 60:.1f} min")
        for item in plan.items:
            from hwtune.tuner.run import _describe

            console.print(f"  [level {item.level}] {_describe(item)}", markup=False)
        for note in plan.notes:
            console.print(f"  note: {note}", markup=False)
        return

    from hwtune.db.store import Store

    with Store.open(db) as store, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), console=console, transient=False, disable=json_out,
    ) as bar:
        task = bar.add_task("tuning", total=len(plan.items))

        def progress(event: str, done: int, total: int, message: str) -> None:
            if event == "warmup":
                bar.update(task, description=f"JIT warm-up: {message}")
            else:
                bar.update(task, completed=done, total=total, description=message)

        opts = TuneOptions(backends=backend_list, budget_s=budget * 60 if budget else None, time_cap_s=time_cap,
                           timeout_s=timeout, resume=resume, fresh=fresh, device=device, warmup=not no_warmup,
                           lease_s=lease)
        report = Tuner(plan, store, opts, profile=profile, progress=progress).run()
        records = store.measurements(run_id=report.run_id)
    if json_out:
        from hwtune.tuner.report import winners

        emit_json({**vars(report), "winners": [w.to_dict() for w in winners(records)]})
    else:
        console.print(_winners_table(records))
        console.print(f"{report.state}: {report.items_done} workloads, {report.records} records "
                      f"({', '.join(f'{k} {v}' for k, v in sorted(report.statuses.items()))}) in "
                      f"{report.elapsed_s / 60:.1f} min; run {report.run_id}, environment {report.environment_hash}",
                      markup=False)
        if report.compile_s:
            console.print("JIT compile (s): " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(report.compile_s.items())),
                          markup=False)
        for note in report.notes:
            console.print(f"note: {note}", markup=False)
    if report.state == "interrupted" and not budget:
        raise typer.Exit(130)
