"""``hwtune bench all2all``: measure MoE all2all candidates on this machine, each in a fresh process group.

Thin: it builds the workloads, calls ``hwtune.probes.all2all.measure_all2all_sweep`` and prints the
records (a table on stderr, or JSON on stdout with ``--json``). Exit codes, as ``hwtune bench attention``:
0 when every record is ``ok`` or ``unsupported`` (and at least one is ``ok``); 1 when a measured candidate
gave a wrong answer, crashed, hung or errored; 3 when every requested candidate is ``unsupported`` here
(the catalogue rejects it, or a package is missing); 2 for bad input.
"""

from __future__ import annotations

from typing import Any, Literal, cast, get_args, get_type_hints

import typer

from hwtune.cli import specs as S
from hwtune.cli.common import RUN_DEVICES, Choices, JsonOpt, console, emit_json, guarded
from hwtune.core.records import MeasurementRecord
from hwtune.core.types import All2AllSpec, All2AllWorkload
from hwtune.tuner.options import split_list


def _device(value: str) -> Literal["cuda", "cpu"]:
    if value == "auto":
        from hwtune.core.detect import detect

        return "cuda" if detect().is_cuda else "cpu"
    return cast(Literal["cuda", "cpu"], value)


def _token_counts(value: str) -> str:
    """--tokens-per-rank's parser: positive whole numbers, comma-separated (typer gathers the option repeated)."""
    parts = split_list(value)
    for part in parts or [value]:
        if not part.strip().isdigit() or int(part) < 1:
            raise ValueError(f"{part.strip()!r} is not a positive whole number of tokens")
    return ",".join(parts)


#: --routing: the MoE router's expert choice, as the workload takes it.
ROUTINGS = Choices(get_args(get_type_hints(All2AllWorkload)["routing"]), "routing", lists=True)
DeviceOpt = RUN_DEVICES.option("auto", "--device", "-d", help="cuda (NCCL, one GPU per rank), cpu (gloo) or auto.")
RoutingOpt = ROUTINGS.option(
    ["uniform"],
    "--routing",
    help="uniform, skewed (hot experts), or both (repeat or comma-separate: --routing uniform,skewed).",
)


def _backends(values: list[str]) -> tuple[list[str], list[str]]:
    """The backends to measure, and those named one by one (not through 'all'): a named backend whose only
    catalogue rejection is its activation-dtype rule is measured, and its correctness gate decides."""
    from hwtune.core import catalogue

    out: list[str] = []
    named: list[str] = []
    for name in split_list(values):
        if name.lower() == "all":
            out += catalogue.names("all2all")
        else:
            named.append(catalogue.get("all2all", name).name)  # unknown names: exit 2 with the known ones
            out.append(named[-1])
    return list(dict.fromkeys(out)), named


def _table(records: list[MeasurementRecord]) -> None:
    from rich.table import Table

    table = Table(title="MoE all2all: dispatch + combine, slowest rank per iteration")
    for col in ("backend", "tokens/rank", "routing", "status", "median us", "p10 us", "p90 us", "GB/s"):
        table.add_column(col, no_wrap=True)
    notes: dict[tuple[str, str, str], None] = {}
    for r in records:
        s, x = r.stats, r.extra
        gbps = x.get("achieved_gbps")
        table.add_row(
            r.backend,
            str(r.workload["tokens_per_rank"]),
            str(r.workload["routing"]),
            r.status,
            f"{s.median_us:.1f}" if s else "",
            f"{s.p10_us:.1f}" if s else "",
            f"{s.p90_us:.1f}" if s else "",
            f"{gbps:.3g}" if gbps else "",
        )
        for note in ([r.message] if r.message else []) + list(x.get("notes", [])):
            notes[(r.backend, r.status, note)] = None
    console.print(table)
    for backend, status, note in notes:
        console.print(f"{backend} ({status}): {note}", markup=False, highlight=False)


def _say_how_to_store(records: list[MeasurementRecord], spec: All2AllSpec) -> None:
    """For a named backend measured despite its activation-dtype rule: bench stores nothing, so say how a stored
    measurement (the only kind selection lifts the rule by) is taken."""
    tested = sorted({r.backend for r in records if r.extra.get("dtype_rule_tested")})
    for name in tested:
        console.print(
            f"{name}: measured in {spec.quant_dtype} although the catalogue rejects that activation dtype, because "
            "you named it; its correctness gate decided. bench stores nothing: to let selection lift the rule for "
            f"this spec here, store a passing run with `hwtune tune --model config.json --ep {spec.ep_size} "
            f"--kinds all2all --backends {name} --quant-dtype {spec.quant_dtype}`.",
            markup=False,
            highlight=False,
        )


@guarded
def all2all(
    backend: list[str] = typer.Option(
        ...,
        "--backend",
        "-b",
        metavar="BACKEND,...|all",
        help="Backend to measure (repeat, comma-separate, or 'all'). One named here whose only catalogue "
        "rejection is its activation-dtype rule is measured anyway: its correctness gate decides.",
    ),
    world_size: int = typer.Option(
        ..., "--world-size", "-n", min=1, help="Ranks = EP size (one GPU per rank on CUDA)."
    ),
    tokens_per_rank: list[str] = typer.Option(
        ["128"],
        "--tokens-per-rank",
        "-t",
        parser=_token_counts,
        metavar="N[,N...]",
        help="Tokens per rank; several to sweep (repeat or comma-separate: -t 64,128).",
    ),
    hidden_size: int = typer.Option(2048, "--hidden-size", min=1, help="Hidden size of each token."),
    topk: int = typer.Option(8, "--topk", min=1, help="Experts per token."),
    num_experts: int | None = typer.Option(
        None, "--num-experts", min=1, help="Experts in total (default 64, or 8 per rank)."
    ),
    quant_dtype: str = S.QUANT_DTYPE.option(
        "bf16", "--quant-dtype", help="Dispatch payload: bf16, fp8 (128-wide block scales) or nvfp4, mxfp8, ..."
    ),
    routing: list[str] = RoutingOpt,
    device: str = DeviceOpt,
    timeout: float = typer.Option(
        300.0,
        "--timeout",
        min=1.0,
        help="Seconds a workload may take before its process group is killed "
        "(the first includes FlashInfer JIT builds).",
    ),
    time_cap: float = typer.Option(10.0, "--time-cap", min=0.01, help="Seconds of timed iterations per workload."),
    capacity_factor: float | None = typer.Option(
        None,
        "--capacity-factor",
        help="nccl_alltoallv: fixed receive buffers of this many times the mean load.",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the tokens and routing."),
    measure_peak: bool = typer.Option(False, "--measure-peak", help="First measure the all-to-all peak bandwidth."),
    explore: bool = typer.Option(
        False, "--explore", help="Also run candidates the catalogue rejects, to find their real limits."
    ),
    no_cuda_graphs: bool = typer.Option(False, "--no-cuda-graphs", help="Time graph-safe candidates eagerly too."),
    json_out: bool = JsonOpt,
) -> None:
    """Measure MoE all2all candidates (correct before timed; every rank agrees) on this machine."""
    from hwtune.probes.all2all.measure import measure_all2all_sweep, measure_peak_bandwidth

    dev = _device(device)
    names, named = _backends(backend)
    experts = num_experts if num_experts is not None else (64 if 64 % world_size == 0 else 8 * world_size)
    spec = All2AllSpec(
        ep_size=world_size, num_experts=experts, topk=topk, hidden_size=hidden_size, quant_dtype=quant_dtype
    )
    tokens = [int(t) for t in dict.fromkeys(split_list(tokens_per_rank))]
    workloads = [All2AllWorkload(spec, t, cast(Any, r)) for r in dict.fromkeys(split_list(routing)) for t in tokens]
    peak = None
    if measure_peak:
        res = measure_peak_bandwidth(world_size, device=dev, timeout_s=timeout)
        peak = res.extra.get("peak_gbps") if res.status == "ok" else None
        if peak is None:
            console.print(f"peak measurement {res.status}: {res.message}", markup=False)
    options = {"capacity_factor": capacity_factor} if capacity_factor is not None else {}
    records = measure_all2all_sweep(
        workloads,
        names,
        device=dev,
        world_size=world_size,
        timeout_s=timeout,
        time_cap_s=time_cap,
        seed=seed,
        options=options,
        peak_gbps=peak,
        explore=explore,
        use_cuda_graphs=not no_cuda_graphs,
        named=named,
    )
    if json_out:
        emit_json([r.to_dict() for r in records])
    else:
        _table(records)
        if peak:
            console.print(f"measured all-to-all peak: {peak:.1f} GB/s per rank", markup=False)
        _say_how_to_store(records, spec)
    statuses = {r.status for r in records}
    if statuses - {"ok", "unsupported"}:
        raise typer.Exit(1)
    if "ok" not in statuses:
        raise typer.Exit(3)
