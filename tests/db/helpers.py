"""Realistic measurement records for store tests, and a field-by-field comparison that treats NaN == NaN."""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

from hwtune.core.devices import simulated
from hwtune.core.environment import Environment, SoftwareStack
from hwtune.core.records import LatencyStats, MeasurementRecord
from hwtune.core.types import All2AllSpec, All2AllWorkload, AttentionSpec, AttentionWorkload

STACK = SoftwareStack(
    torch="2.11.0+cu130",
    cuda_runtime="13.0",
    triton="3.6.0",
    flashinfer="0.6.18.post1",
    cudnn="9.10",
    nccl="2.27.3",
    hwtune="0.1.0",
)
H100 = Environment(simulated("h100"), STACK)
B200 = Environment(simulated("b200"), STACK)
SPEC = AttentionSpec(num_heads=32, num_kv_heads=8, head_size=128)
SPEC_FP8 = AttentionSpec(num_heads=32, num_kv_heads=8, head_size=128, kv_cache_dtype="fp8")
A2A = All2AllSpec(ep_size=8, num_experts=256, topk=8, hidden_size=7168, quant_dtype="fp8")
T0 = _dt.datetime(2026, 11, 20, 12, 0, 0, 123456, tzinfo=_dt.timezone.utc)


def attention(
    spec: AttentionSpec = SPEC,
    batch: int = 8,
    context: int = 2048,
    backend: str = "FLASH_ATTN",
    tactic: str = "fa3",
    *,
    env: Environment = H100,
    run_id: str | None = "run-1",
    status: str = "ok",
    median: float = 40.0,
    seq: int = 0,
    phase: str = "decode",
    **extra_fields: Any,
) -> MeasurementRecord:
    wl = (
        AttentionWorkload(spec, phase, batch, context)
        if phase != "prefill"
        else AttentionWorkload(spec, "prefill", batch, context, query_len=min(context, 512))
    )
    stats = (
        LatencyStats(
            median_us=median,
            p10_us=median * 0.95,
            p90_us=median * 1.1,
            mean_us=median * 1.01,
            n=200,
            spread=0.15,
            ci95_rel=0.01,
        )
        if status == "ok"
        else None
    )
    fields: dict[str, Any] = dict(
        kind="attention",
        workload=wl.to_dict(),
        workload_key=wl.key(),
        backend=backend,
        tactic=tactic,
        status=status,
        stats=stats,
        environment=env.fingerprint(),
        environment_hash=env.hash(),
        run_id=run_id,
        host="node-07",
        gpu_uuid="GPU-1234",
        timing_method="cuda_graph",
        compile_time_s=1.25,
        created_at=T0 + _dt.timedelta(seconds=seq),
        error={"max_abs": 0.0078125, "max_rel": 0.001} if status == "ok" else None,
        message="" if status == "ok" else f"{status} in worker",
        extra={"seq": seq},
    )
    fields.update(extra_fields)
    return MeasurementRecord(**fields)


def all2all(
    tokens: int = 128, backend: str = "deepep_low_latency", *, run_id: str | None = None, seq: int = 0
) -> MeasurementRecord:
    wl = All2AllWorkload(A2A, tokens)
    return MeasurementRecord(
        kind="all2all",
        workload=wl.to_dict(),
        workload_key=wl.key(),
        backend=backend,
        tactic="default",
        status="ok",
        stats=LatencyStats.from_samples([10.0 + i for i in range(11)], ci95_rel=0.02),
        environment=B200.fingerprint(),
        environment_hash=B200.hash(),
        run_id=run_id,
        host="node-b",
        created_at=_dt.datetime(2026, 11, 20, 14, 0, tzinfo=_dt.timezone(_dt.timedelta(hours=2))),
        timing_method="events",
        extra={"nested": {"list": [1, 2.5, "x"]}},
    )


def variety() -> list[MeasurementRecord]:
    """Every kind of record: ok, failed statuses, NaN/inf errors, no run, another env, all2all, prefill."""
    out = [attention(batch=b, context=c, seq=i) for i, (b, c) in enumerate([(1, 512), (8, 2048), (64, 8192)])]
    out.append(attention(backend="FLASHINFER", tactic="fa2", median=45.5, seq=10))
    out.append(
        attention(
            backend="HWTUNE_TRITON_ATTN",
            tactic="default",
            status="wrong_answer",
            seq=11,
            error={"max_abs": math.nan, "max_rel": math.inf, "neg": -math.inf},
        )
    )
    out.append(
        attention(
            backend="FLEX_ATTENTION",
            tactic="default",
            status="crashed",
            seq=12,
            error=None,
            message="CUDA error: an illegal memory access was encountered",
            compile_time_s=None,
        )
    )
    out.append(attention(spec=SPEC_FP8, backend="FLASHINFER", tactic="trtllm-gen", status="timeout", seq=13))
    out.append(attention(run_id=None, seq=14, gpu_uuid=None, timing_method=None, extra={}))
    out.append(attention(env=B200, phase="prefill", batch=2, context=4096, seq=15))
    out.append(all2all(run_id="run-a2a", seq=16))
    out.append(all2all(tokens=512, backend="naive", seq=17))
    return out


def _norm(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    if isinstance(value, _dt.datetime):
        return value.astimezone(_dt.timezone.utc).isoformat()
    return value


def comparable(rec: MeasurementRecord) -> dict[str, Any]:
    """Every field of ``rec`` as plain data (NaN spelled out, times in UTC) for exact comparison."""
    return _norm(rec.to_dict() | {"created_at": rec.created_at})


def identity(rec: MeasurementRecord) -> tuple[Any, ...]:
    return (rec.run_id or "", rec.environment_hash, rec.workload_key, rec.backend, rec.tactic)


def same_records(a: list[MeasurementRecord], b: list[MeasurementRecord]) -> bool:
    key = lambda r: identity(r)  # noqa: E731
    return [comparable(r) for r in sorted(a, key=key)] == [comparable(r) for r in sorted(b, key=key)]


def cli(*args: str, stdin: str | None = None) -> Any:
    """``hwtune db ARGS`` in-process (CliRunner): returncode, stdout (JSON only) and stderr (people)."""
    from types import SimpleNamespace

    from typer.testing import CliRunner

    from hwtune.cli.main import app

    res = CliRunner().invoke(app, ["db", *args], input=stdin)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return SimpleNamespace(returncode=res.exit_code, stdout=res.stdout, stderr=res.stderr)
