"""Winners per workload: the end-of-run table, and the data behind `hwtune show` and `hwtune report`."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

from hwtune.core.records import MeasurementRecord


@dataclass(frozen=True)
class Winner:
    """The fastest ok candidate of one workload, the runner-up and its margin, and how many candidates were ok and
    how many failed: one row of the end-of-run table."""

    kind: str
    label: str  # e.g. "decode b64 ctx32768"
    backend: str
    tactic: str
    median_us: float
    runner_up: str | None
    margin: float | None  # runner-up / winner - 1
    candidates: int
    failures: int

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def workload_label(rec: MeasurementRecord) -> tuple[tuple, str]:
    """(sort key, label) of a record's workload."""
    w = rec.workload
    if rec.kind == "all2all":
        s = w["spec"]
        return (
            ("all2all", s["ep_size"], s["quant_dtype"], s["hidden_size"], w["tokens_per_rank"]),
            f"ep{s['ep_size']} {s['quant_dtype']} h{s['hidden_size']} top{s['topk']} {w['tokens_per_rank']} tok/rank",
        )
    q = f" q{w['query_len']}" if w["phase"] != "decode" or w["query_len"] > 1 else ""
    s = w["spec"]
    tags = [f"h{s['num_heads']}/{s['num_kv_heads']}/{s['head_size']}"]
    tags += [f"kv {s['kv_cache_dtype']}"] if s["kv_cache_dtype"] != "auto" else []
    tags += [s["kv_layout"]] if s["kv_layout"] != "auto" else []
    tags += [f"dcp{s['dcp_size']}"] if s["dcp_size"] > 1 else []
    tags += ["ragged"] if w.get("context_lens") else []
    return (
        (w["phase"], tuple(tags), w["batch"], w["context_len"], w["query_len"]),
        f"{w['phase']} b{w['batch']} ctx{w['context_len']}{q} [{', '.join(tags)}]",
    )


def winners(records: Iterable[MeasurementRecord]) -> list[Winner]:
    """The winner of every workload that has at least one ok measurement, in workload order."""
    by_workload: dict[str, list[MeasurementRecord]] = defaultdict(list)
    for r in records:
        by_workload[r.workload_key].append(r)
    out = []
    for recs in by_workload.values():
        ok = sorted((r for r in recs if r.ok and r.stats), key=lambda r: r.stats.median_us)  # type: ignore[union-attr]
        if not ok:
            continue
        best = ok[0]
        second = next((r for r in ok[1:] if (r.backend, r.tactic) != (best.backend, best.tactic)), None)
        key, label = workload_label(best)
        out.append(
            (
                key,
                Winner(
                    kind=best.kind,
                    label=label,
                    backend=best.backend,
                    tactic=best.tactic,
                    median_us=best.stats.median_us,  # type: ignore[union-attr]
                    runner_up=f"{second.backend}/{second.tactic}" if second else None,
                    margin=(second.stats.median_us / best.stats.median_us - 1) if second else None,  # type: ignore[union-attr]
                    candidates=len(ok),
                    failures=sum(r.status in ("crashed", "wrong_answer", "error", "timeout") for r in recs),
                ),
            )
        )
    return [w for _, w in sorted(out, key=lambda kw: (kw[1].kind, kw[0]))]


#: FlashInfer first-use compilation (seconds, summed over its kernels) above which a tune's end says how to skip it.
JIT_HINT_S = 60.0


def jit_cache_hint(
    compile_s: dict[str, float], flashinfer: str | None, jit_cache_installed: bool, cuda: str | None
) -> str | None:
    """A note for a run whose FlashInfer kernels compiled on first use for long, where FlashInfer's prebuilt kernel
    cache (``flashinfer-jit-cache``, the same version as ``flashinfer-python``, from FlashInfer's own package index per
    CUDA version) is not installed. The seconds are summed over kernels the warm-up compiles in parallel: wall time
    was shorter."""
    spent = sum(v for k, v in compile_s.items() if k.startswith("FLASHINFER/"))
    if jit_cache_installed or spent < JIT_HINT_S or not flashinfer:
        return None
    index = f"https://flashinfer.ai/whl/cu{cuda.replace('.', '')}" if cuda else "https://flashinfer.ai/whl/cuXYZ"
    return (
        f"FlashInfer compiled its kernels on first use ({spent:.0f} s summed over kernels compiled in parallel; cached "
        f"on this machine for later runs): to skip it on a new node, pip install flashinfer-jit-cache=={flashinfer} "
        f"--index-url {index}"
    )
