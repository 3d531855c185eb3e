"""``hwtune tune``: plan, measure and store; the orchestration lives in hwtune.tuner."""

from __future__ import annotations

import shlex
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

from hwtune.cli import specs as S
from hwtune.cli.common import DEVICE_NAMES, RUN_DEVICES, Choices, JsonOpt, console, emit_json, guarded, winners_table
from hwtune.tuner.options import KINDS


def _check_tune_device(name: str) -> None:
    if name not in RUN_DEVICES.values:
        DEVICE_NAMES.one(name)  # a device to plan for (--dry-run): the library's error lists the known ones


#: --kinds: attention and/or all2all, the option repeated or comma-separated.
TUNE_KINDS = Choices(KINDS, "kind", lists=True)
#: --device: this node (auto, cuda, cpu), or a device to plan for with --dry-run.
TUNE_DEVICES = Choices(
    RUN_DEVICES.values,
    "device",
    check=_check_tune_device,
    complete=DEVICE_NAMES.completions,
    metavar="<auto|cuda|cpu|DEVICE>",
)
KindsOpt = TUNE_KINDS.option(
    list(KINDS), "--kinds", help="attention and/or all2all (repeat or comma-separate: --kinds attention,all2all)."
)
QuantDtypesOpt = S.QUANT_DTYPE_LIST.option(
    None,
    "--quant-dtype",
    help="Activation dtypes the engine dispatches to the experts (all2all plans), e.g. nvfp4, or bf16,fp8; "
    "repeat or comma-separate. Default: what the model's quantization config dispatches, else bf16.",
    checked=False,  # tuner.options.parse_quant_dtypes checks it, with its own message (tests/tuner/test_plan.py)
)


def _winners_table(records: list) -> Table:
    from hwtune.tuner.report import winners

    return winners_table([w.to_dict() for w in winners(records)])


@guarded
def tune(
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Hugging Face config.json to plan from."),
    plan_file: Optional[Path] = typer.Option(None, "--plan", help="TOML plan file (docs/tuning.md)."),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor parallelism the engine runs with."),
    ep: Optional[int] = typer.Option(None, "--ep", min=1, help="Expert parallelism (MoE all2all workloads)."),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs", min=1, help="Largest decode batch the engine runs."),
    max_model_len: Optional[int] = typer.Option(
        None, "--max-model-len", min=1, help="Longest context the engine serves."
    ),
    kinds: list[str] = KindsOpt,
    backends: Optional[list[str]] = typer.Option(
        None,
        "--backends",
        metavar="BACKEND[:TACTIC],...",
        help="Only these backends, BACKEND or BACKEND:TACTIC (repeat or comma-separate).",
    ),
    kv_cache_dtype: Optional[str] = S.KV_CACHE_DTYPES.option(
        None, "--kv-cache-dtype", help=S.KV_CACHE_DTYPE_HELP + " For --model plans; default: the model's."
    ),
    block_size: Optional[int] = typer.Option(None, "--block-size", min=1),
    kv_layout: Optional[str] = S.KV_LAYOUTS.option(
        None, "--kv-layout", help=S.KV_LAYOUT_HELP + " For --model plans; default: auto (each layout a backend takes)."
    ),
    dcp: Optional[int] = typer.Option(None, "--dcp", min=1),
    pcp: Optional[int] = typer.Option(None, "--pcp", min=1),
    cp_interleave: Optional[int] = typer.Option(None, "--cp-interleave", min=1),
    spec_tokens: Optional[int] = typer.Option(None, "--spec-tokens", min=0),
    quant_dtype: Optional[list[str]] = QuantDtypesOpt,
    quick: bool = typer.Option(False, "--quick", help="A small plan (about 2 minutes on an H100, JIT included)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and its estimated time; measure nothing."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run of the same plan."),
    fresh: bool = typer.Option(False, "--fresh", help="Measure everything again even if this plan already ran."),
    budget: Optional[float] = typer.Option(
        None, "--budget", min=0.1, help="Stop after this many minutes (coarse grid first)."
    ),
    time_cap: Optional[float] = typer.Option(
        None, "--time-cap", min=0.01, help="Seconds of timing per candidate at most."
    ),
    timeout: float = typer.Option(600.0, "--timeout", min=1.0, help="Seconds before a candidate is killed as hung."),
    device: str = TUNE_DEVICES.option(
        "auto",
        "--device",
        "-d",
        help="auto (this node), cuda, cpu, or a device to plan for with --dry-run: "
        + ", ".join(DEVICE_NAMES.values[1:])
        + ".",
    ),
    no_warmup: bool = typer.Option(False, "--no-warmup", help="Skip the parallel JIT warm-up."),
    lease: float = typer.Option(
        120.0,
        "--lease",
        min=3.0,
        help="Seconds a claimed item stays this node's without a "
        "heartbeat; a dead node's items return to the queue after it.",
    ),
    db: Optional[str] = typer.Option(
        None,
        "--db",
        envvar="HWTUNE_DATABASE_URL",
        help="Store URL (default: a SQLite file in the user data directory).",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Tune this node: every valid backend and tactic on every planned workload, results stored as measured."""
    from hwtune.tuner.options import (
        DEVICES,
        TuneOptions,
        parse_backends,
        parse_kinds,
        parse_quant_dtypes,
        resolve_profile,
    )
    from hwtune.tuner.plan_model import build_plan

    profile = resolve_profile(device, dry_run=dry_run)
    opts = TuneOptions(
        backends=parse_backends(backends),
        budget_s=budget * 60 if budget is not None else None,
        time_cap_s=time_cap,
        timeout_s=timeout,
        resume=resume,
        fresh=fresh,
        device=device if device in DEVICES else ("cuda" if profile.is_cuda and not profile.simulated else "cpu"),
        warmup=not no_warmup,
        lease_s=lease,
        bisect=not quick,
    )
    opts.check()
    kind_list = parse_kinds(kinds)
    quant_dtypes = parse_quant_dtypes(quant_dtype)
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
    if device == "auto" and not profile.is_cuda and not json_out:
        console.print("no CUDA GPU: measuring CPU backends; use --device to plan for a GPU (with --dry-run)")
    _measure(plan, profile, opts, db, json_out, model, tp)


def _measure(
    plan: Plan,
    profile: DeviceProfile,
    opts: TuneOptions,
    db: Optional[str],
    json_out: bool,
    model,
    tp: int,  # noqa: ANN001
) -> None:
    """Run the plan, report it, and exit non-zero when nothing was measured or the run was interrupted."""
    report, records = _run(plan, profile, opts, db, json_out)
    _print_report(report, records, json_out)
    if not json_out:
        _print_next_steps(plan, db, model, tp)
    if report.measured_nothing:
        _fail_measured_nothing(records, profile)
    if report.state == "interrupted" and opts.budget_s is None:
        raise typer.Exit(130)


def _print_dry_run(plan: Plan, profile: DeviceProfile, opts: TuneOptions, json_out: bool) -> None:
    from hwtune.tuner.estimate import estimate_seconds
    from hwtune.tuner.run import describe_item

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


def _select_command(plan: Plan, db: Optional[str], model: Optional[Path], tp: int) -> str | None:
    """The `hwtune select attention` command that ranks from what this plan measured (None: no attention)."""
    from hwtune.core.types import AttentionWorkload

    spec = next((i.workload.spec for i in plan.items if isinstance(i.workload, AttentionWorkload)), None)
    if spec is None:
        return None
    if model is not None:
        what = f"--model {shlex.quote(str(model))}" + (f" --tp {tp}" if tp != 1 else "")
    else:
        what = f"--num-heads {spec.num_heads} --num-kv-heads {spec.num_kv_heads} --head-size {spec.head_size}"
        what += f" --dtype {spec.dtype}" if spec.dtype != "bfloat16" else ""
    what += f" --kv-cache-dtype {spec.kv_cache_dtype}" if spec.kv_cache_dtype != "auto" else ""
    what += f" --kv-layout {spec.kv_layout}" if spec.kv_layout != "auto" and model is None else ""
    return f"hwtune select attention {what}" + (f" --db {shlex.quote(db)}" if db else "") + " --explain"


def _print_next_steps(plan: Plan, db: Optional[str], model: Optional[Path], tp: int) -> None:
    """Where the results are and the command that selects from them."""
    from hwtune.db.urls import mask, resolve

    console.print(f"stored in {mask(resolve(db))}", markup=False)
    command = _select_command(plan, db, model, tp)
    if command:
        console.print(f"select from it: {command}", markup=False)


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


def _jit_hint(report: TuneReport) -> list[str]:
    from hwtune.core.packages import installed_version, torch_cuda_version
    from hwtune.tuner.report import jit_cache_hint

    hint = jit_cache_hint(
        report.compile_s,
        installed_version("flashinfer-python"),
        installed_version("flashinfer-jit-cache") is not None,
        torch_cuda_version(),
    )
    return [hint] if hint else []


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
    if report.backend_s or report.warmup_s:
        spent = sorted(report.backend_s.items(), key=lambda kv: -kv[1])
        console.print(
            f"time (s): warm-up (JIT) {report.warmup_s:.0f}; measuring, compilation included, "
            + (", ".join(f"{k} {v:.0f}" for k, v in spent) or "nothing"),
            markup=False,
        )
    for note in report.notes + _jit_hint(report):
        console.print(f"note: {note}", markup=False)
