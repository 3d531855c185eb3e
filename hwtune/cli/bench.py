"""``hwtune bench attention``: measure one candidate on one workload and print its record.

Exit codes: 0 when every record is ok; 1 when a measured candidate crashed, hung, errored or gave a wrong
answer; 2 bad input; 3 when the catalogue rejects the backend (or tactic) for this spec on this device.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from hwtune.cli import bench_all2all
from hwtune.cli import specs as S
from hwtune.cli.common import PHASE_NAMES, RUN_DEVICES, JsonOpt, console, emit_json, guarded
from hwtune.core import catalogue
from hwtune.core.devices import CPU_PROFILE, DeviceProfile
from hwtune.core.errors import BackendNotValidError, InvalidSpecError
from hwtune.core.records import MeasurementRecord
from hwtune.core.types import AttentionWorkload

app = typer.Typer(
    help="Measure one candidate backend on one workload (correctness first, then timing).", no_args_is_help=True
)


def print_records(records: list[MeasurementRecord], json_out: bool) -> None:
    """Print records as a table for people, or as a JSON list on stdout under ``--json``."""
    if json_out:
        emit_json([r.to_dict() for r in records])
        return
    table = Table(title="hwtune bench")
    for col in ("backend", "tactic", "status", "median us", "p10-p90 us", "n", "method", "compile s", "error / reason"):
        table.add_column(col, overflow="fold")
    for r in records:
        s = r.stats
        err = ", ".join(f"{k}={v:.3g}" for k, v in (r.error or {}).items() if k.endswith(("rel_l2", "lse_max_abs")))
        table.add_row(
            r.backend,
            r.tactic,
            r.status,
            f"{s.median_us:.2f}" if s else "",
            f"{s.p10_us:.2f}-{s.p90_us:.2f}" if s else "",
            str(s.n) if s else "",
            _method(r),
            f"{r.compile_time_s:.1f}" if r.compile_time_s is not None else "",
            r.message or err,
        )
    console.print(table)


def _method(r: MeasurementRecord) -> str:
    """The timing method, with a plain call's host time (the timed interval holds GPU time only; an engine that does
    not replay the call from a CUDA graph pays the host time too) or that it waited for the GPU."""
    extra = r.extra or {}
    if extra.get("host_sync"):
        return f"{r.timing_method} (host sync: host time included)"
    if extra.get("host_us") is not None:
        return f"{r.timing_method} (host {extra['host_us']:.0f} us)"
    return r.timing_method or ""


def exit_code(records: list[MeasurementRecord]) -> int:
    """The command's exit status: 0 when every record is ok or unsupported (nothing to blame on the backend), else 1."""
    return 0 if all(r.status in ("ok", "unsupported") for r in records) else 1


def _planned(workload: AttentionWorkload, profile: DeviceProfile, backend: str, tactic: str | None) -> list:
    """The candidates ``bench`` runs: every runnable tactic, or the one asked for (runnable or not, so that
    its record says why); a backend that cannot run the workload at all is an error naming each reason."""
    from hwtune.probes.attention.measure import plan_candidates

    phase = workload.phase
    b = catalogue.get("attention", backend)
    planned = plan_candidates(workload, profile, [b.name])
    if tactic is not None:
        if b.tactic(tactic) is None:
            raise InvalidSpecError(
                f"{b.name} has no tactic {tactic!r}; its tactics: {', '.join(t.name for t in b.tactics)}"
            )
        planned = [p for p in planned if p.tactic == tactic]
        if not planned:
            raise InvalidSpecError(f"{b.name} tactic {tactic} does not serve the {phase} phase")
    if planned and not any(p.runnable for p in planned):
        reasons = sorted({r for p in planned for r in p.reasons})
        raise BackendNotValidError(
            f"{b.name} cannot run this workload on {profile.describe()}:\n" + "\n".join(f"  - {r}" for r in reasons),
            backend=b.name,
            reasons=reasons,
            valid=[],
        )
    for p in planned:
        if not p.runnable and tactic is None:
            console.print(f"skipped {p.backend} tactic {p.tactic}: {p.reasons[0]}", markup=False)
    if tactic is None:
        planned = [p for p in planned if p.runnable]
    return planned


PhaseOpt = PHASE_NAMES.option("decode", "--phase", help="The batch: decode, prefill or mixed (both).")
DeviceOpt = RUN_DEVICES.option("auto", "--device", help="cuda, cpu, or auto (cuda when NVML sees a GPU).")


@app.command("attention")
@guarded
def attention(
    backend: str = typer.Option(..., "--backend", "-b", help="Backend to measure, e.g. FLASHINFER."),
    tactic: Optional[str] = typer.Option(None, "--tactic", "-t", help="One tactic (default: every valid one)."),
    phase: str = PhaseOpt,
    batch: int = typer.Option(8, "--batch", min=1),
    context: int = typer.Option(4096, "--context", min=1, help="KV tokens per request (cached plus new)."),
    query_len: Optional[int] = typer.Option(
        None, "--query-len", min=1, help="New tokens per request (prefill chunk; decode: 1 + spec tokens)."
    ),
    num_prefill: int = typer.Option(1, "--num-prefill", min=1, help="Prefill requests in a mixed batch."),
    model: Optional[Path] = S.ModelOpt,
    tp: int = S.TpOpt,
    num_heads: Optional[int] = S.NumHeadsOpt,
    num_kv_heads: Optional[int] = S.NumKvHeadsOpt,
    head_size: Optional[int] = S.HeadSizeOpt,
    dtype: Optional[str] = S.DtypeOpt,
    kv_cache_dtype: str = S.KvDtypeOpt,
    block_size: int = S.BlockSizeOpt,
    kv_layout: str = S.KvLayoutOpt,
    dcp: int = S.DcpOpt,
    pcp: int = S.PcpOpt,
    cp_interleave: int = S.CpInterleaveOpt,
    spec_tokens: int = S.SpecTokensOpt,
    sinks: bool = S.SinksOpt,
    sliding_window: Optional[int] = S.SlidingOpt,
    soft_cap: Optional[float] = S.SoftCapOpt,
    mla: bool = S.MlaOpt,
    device: str = DeviceOpt,
    time_cap: float = typer.Option(3.0, "--time-cap", min=0.01, help="Seconds of timing per candidate at most."),
    timeout: float = typer.Option(600.0, "--timeout", min=1.0, help="Seconds before a candidate is killed as hung."),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = JsonOpt,
) -> None:
    """Measure an attention candidate: correctness gate against the float32 reference, then timing."""
    from hwtune.core.detect import detect
    from hwtune.probes.attention.measure import measure_attention
    from hwtune.probes.timing import TimingOptions

    spec = S.build_attention_spec(
        model,
        tp,
        num_heads,
        num_kv_heads,
        head_size,
        dtype,
        kv_cache_dtype,
        block_size,
        kv_layout,
        dcp,
        pcp,
        spec_tokens,
        sinks,
        sliding_window,
        soft_cap,
        mla,
        cp_interleave,
    )
    if query_len is None:
        query_len = {"decode": spec.query_len_decode, "prefill": context, "mixed": min(512, context)}.get(phase, 1)
    workload = AttentionWorkload(
        spec,
        phase,
        batch=batch,
        context_len=context,
        query_len=query_len,  # type: ignore[arg-type]
        num_prefill=num_prefill if phase == "mixed" else 0,
    )
    profile = detect()
    if device == "auto":
        device = "cuda" if profile.is_cuda else "cpu"
    if device == "cpu":
        profile = CPU_PROFILE
    planned = _planned(workload, profile, backend, tactic)
    timing = dataclasses.replace(TimingOptions(), time_cap_s=time_cap)
    records = measure_attention(
        workload, planned, device=device, profile=profile, timing=timing, timeout_s=timeout, seed=seed
    )
    print_records(records, json_out)
    raise typer.Exit(exit_code(records))


app.command("all2all")(bench_all2all.all2all)
