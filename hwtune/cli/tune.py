"""``hwtune tune``: plan, measure and store; the orchestration lives in hwtune.tuner."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

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

if TYPE_CHECKING:
    from hwtune.core.devices import DeviceProfile
    from hwtune.core.records import MeasurementRecord
    from hwtune.tuner.options import TuneOptions
    from hwtune.tuner.plan import Plan
    from hwtune.tuner.run import TuneReport

from hwtune.cli.common import JsonOpt, console, emit_json, guarded


def _winners_table(records: list) -> Table:
    from hwtune.tuner.report import winners

    table = Table(title="winners per workload")
    for col in ("workload", "winner", "median us", "runner-up", "margin", "failed"):
        table.add_column(col)
    for w in winners(records):
        table.add_row(
            w.label,
            f"{w.backend}/{w.tactic}",
            f"{w.median_us:.2f}",
            w.runner_up or "",
            f"+{w.margin:.1%}" if w.margin is not None else "",
            str(w.failures) if w.failures else "",
        )
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
    pcp: Optional[int] = typer.Option(None, "--pcp"),
    cp_interleave: Optional[int] = typer.Option(None, "--cp-interleave"),
    spec_tokens: Optional[int] = typer.Option(None, "--spec-tokens"),
    quant_dtype: Optional[list[str]] = typer.Option(
        None,
        "--quant-dtype",
        help="Activation dtypes the engine dispatches to the experts (all2all plans), e.g. nvfp4, or bf16,fp8; "
        "repeat or comma-separate. Default: what the model's quantization config dispatches, else bf16.",
    ),
    quick: bool = typer.Option(False, "--quick", help="A small plan (about 2 minutes on an H100, JIT included)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and its estimated time; measure nothing."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run of the same plan."),
    fresh: bool = typer.Option(False, "--fresh", help="Measure everything again even if this plan already ran."),
    budget: Optional[float] = typer.Option(None, "--budget", help="Stop after this many minutes (coarse grid first)."),
    time_cap: Optional[float] = typer.Option(None, "--time-cap", help="Seconds of timing per candidate at most."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds before a candidate is killed as hung."),
    device: str = typer.Option("auto", "--device", help="auto, cuda or cpu."),
    no_warmup: bool = typer.Option(False, "--no-warmup", help="Skip the parallel JIT warm-up."),
    lease: float = typer.Option(
        120.0,
        "--lease",
        help="Seconds a claimed item stays this node's without a "
        "heartbeat; a dead node's items return to the queue after it.",
    ),
    db: Optional[str] = typer.Option(None, "--db", help="Store URL (default: HWTUNE_DATABASE_URL, else local SQLite)."),
    json_out: bool = JsonOpt,
) -> None:
    """Tune this node: every valid backend and tactic on every planned workload, results stored as measured."""
    from hwtune.tuner.options import TuneOptions, parse_backends, parse_kinds, parse_quant_dtypes, resolve_profile
    from hwtune.tuner.plan import build_plan

    opts = TuneOptions(
        backends=parse_backends(backends),
        budget_s=budget * 60 if budget is not None else None,
        time_cap_s=time_cap,
        timeout_s=timeout,
        resume=resume,
        fresh=fresh,
        device=device,
        warmup=not no_warmup,
        lease_s=lease,
    )
    opts.check()
    kind_list = parse_kinds(kinds)
    quant_dtypes = parse_quant_dtypes(quant_dtype)
    profile = resolve_profile(device)
    overrides = dict(
        kv_cache_dtype=kv_cache_dtype,
        block_size=block_size,
        kv_layout=kv_layout,
        dcp_size=dcp,
        pcp_size=pcp,
        cp_interleave=cp_interleave,
        spec_tokens=spec_tokens,
    )
    plan = build_plan(
        model,
        plan_file,
        tp=tp,
        ep=ep,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        kinds=kind_list,
        quick=quick,
        device=profile,
        attention_overrides=overrides,
        quant_dtypes=quant_dtypes,
    )
    if dry_run:
        _print_dry_run(plan, profile, opts, json_out)
        return
    report, records = _run(plan, profile, opts, db, json_out)
    _print_report(report, records, json_out)
    if report.measured_nothing:
        _fail_measured_nothing(records, profile)
    if report.state == "interrupted" and not budget:
        raise typer.Exit(130)


def _print_dry_run(plan: Plan, profile: DeviceProfile, opts: TuneOptions, json_out: bool) -> None:
    from hwtune.tuner.run import describe_item, estimate_seconds

    est = estimate_seconds(plan, profile, opts.backends)
    if json_out:
        emit_json({"plan": plan.to_dict(), "estimated_seconds": est, "device": profile.describe()})
        return
    console.print(
        f"plan {plan.name!r} ({plan.digest()}): {len(plan.items)} workloads on {profile.describe()}, "
        f"estimated {est / 60:.1f} min"
    )
    for item in plan.items:
        console.print(f"  [level {item.level}] {describe_item(item)}", markup=False)
    for note in plan.notes:
        console.print(f"  note: {note}", markup=False)


def _run(
    plan: Plan, profile: DeviceProfile, opts: TuneOptions, db: Optional[str], json_out: bool
) -> tuple[TuneReport, list[MeasurementRecord]]:
    """Run the tuner with a progress bar on stderr; returns its report and the run's records."""
    from hwtune.db.store import Store
    from hwtune.tuner.run import Tuner

    with (
        Store.open(db) as store,
        Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
            disable=json_out,
        ) as bar,
    ):
        task = bar.add_task("tuning", total=len(plan.items))

        def progress(event: str, done: int, total: int, message: str) -> None:
            if event == "warmup":
                bar.update(task, description=f"JIT warm-up: {message}")
            else:
                bar.update(task, completed=done, total=total, description=message)

        report = Tuner(plan, store, opts, profile=profile, progress=progress).run()
        return report, store.measurements(run_id=report.run_id)


def _fail_measured_nothing(records: list[MeasurementRecord], profile: DeviceProfile) -> None:
    """A run that stored no successful measurement is a failure, with the reasons it got (exit 1)."""
    reasons: dict[str, int] = {}
    for r in records:
        reasons[f"{r.backend}/{r.tactic}: {r.status}: {r.message}"[:300]] = 1
    shown = "\n".join(f"  - {why}" for why in list(reasons)[:8]) or "  - no candidate was planned"
    console.print(
        f"[bold red]measured nothing on {profile.describe()}[/]: no candidate produced a timed, correct "
        f"result. Reasons recorded:\n{shown}\nName backends that run here with --backends (see "
        "`hwtune backends`), or use --device to plan for a GPU with --dry-run.",
        highlight=False,
    )
    raise typer.Exit(1)


def _print_report(report: TuneReport, records: list[MeasurementRecord], json_out: bool) -> None:
    from hwtune.tuner.report import winners

    if json_out:
        emit_json({**vars(report), "winners": [w.to_dict() for w in winners(records)]})
        return
    console.print(_winners_table(records))
    console.print(
        f"{report.state}: {report.items_done} workloads, {report.records} records "
        f"({', '.join(f'{k} {v}' for k, v in sorted(report.statuses.items()))}) in "
        f"{report.elapsed_s / 60:.1f} min; run {report.run_id}, environment {report.environment_hash}",
        markup=False,
    )
    if report.compile_s:
        console.print(
            "JIT compile (s): " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(report.compile_s.items())), markup=False
        )
    for note in report.notes:
        console.print(f"note: {note}", markup=False)
