"""Ranks of a CPU gloo process group for tests/selector/test_ranks.py: each rank selects from its own store.

``launch`` writes one SQLite store per rank (different measurements, so the ranks' own answers differ),
spawns ``world`` processes that join one gloo group through a FileStore, and runs every scenario in
``SCENARIOS`` in order on every rank, with a barrier between scenarios. Each rank writes what each scenario
returned (or raised) to ``result-<rank>.json``. Collectives time out after ``COLLECTIVE_TIMEOUT_S`` and the
launcher kills ranks still alive after ``timeout_s``, so a hang fails the test instead of blocking CI.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import multiprocessing as mp
import os
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from hwtune.core.devices import simulated
from hwtune.core.environment import current_environment
from hwtune.core.records import LatencyStats, MeasurementRecord
from hwtune.core.types import All2AllSpec, All2AllWorkload, AttentionSpec, AttentionWorkload

WORLD = 3
COLLECTIVE_TIMEOUT_S = 20
A2A = All2AllSpec(8, 256, 8, 7168, "fp8")
ATTN = AttentionSpec(32, 8, 128)
MLA = AttentionSpec(
    128, 1, 576, use_mla=True, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128
)
#: An MLA spec no backend serves on the CPU (hwtune's torch MLA kernel reads an NHD cache only), while a GPU's
#: engine backends, whose latent cache has no layout setting, do.
MLA_HND = dataclasses.replace(MLA, kv_layout="HND")
#: Per rank: the all2all backend its store measures fastest (None: an empty store, so static priorities).
A2A_FASTEST = {0: "deepep_low_latency", 1: "naive", 2: None}
#: Per rank: the attention backend and tactic its store measures fastest (ranks 0 and 2: same backend).
ATTN_FASTEST = {0: ("FLASHINFER", "fa3"), 1: ("FLASH_ATTN", "fa3"), 2: ("FLASHINFER", "fa2-tc")}


def _record(kind: str, w: Any, device: str, backend: str, tactic: str, us: float) -> MeasurementRecord:
    env = current_environment(simulated(device))
    return MeasurementRecord(
        kind=kind,
        workload=w.to_dict(),
        workload_key=w.key(),
        backend=backend,
        tactic=tactic,
        status="ok",
        stats=LatencyStats.from_samples([us, us, us]),
        environment=env.fingerprint(),
        environment_hash=env.hash(),
        host="node-a",
        run_id="run-a",
    )


def store_records(rank: int) -> list[MeasurementRecord]:
    """This rank's measurements: its fastest all2all and attention backends 5x faster than the others (no ties:
    a tie's order is not guaranteed to be the same in every process)."""
    out = []
    for tokens in (1, 16, 128, 1024):
        for b in ("deepep_low_latency", "naive", "allgather_reducescatter") if A2A_FASTEST[rank] else ():
            w = All2AllWorkload(A2A, tokens)
            out.append(_record("all2all", w, "b200", b, "default", 10.0 if b == A2A_FASTEST[rank] else 50.0))
    attention = [("FLASHINFER", "fa2-tc"), ("FLASHINFER", "fa3"), ("FLASH_ATTN", "fa3")]
    for batch in (1, 16, 64):
        for context in (512, 4096):
            for phase in ("decode", "prefill"):
                query = {"query_len": 512} if phase == "prefill" else {}
                w = AttentionWorkload(ATTN, phase, 1 if phase == "prefill" else batch, context, **query)
                for b, t in attention:
                    fastest_backend, fastest_tactic = ATTN_FASTEST[rank]
                    us = 10.0 if (b, t) == ATTN_FASTEST[rank] else 12.0 if b == fastest_backend else 50.0
                    us *= 1 + batch * context / 1e5
                    out.append(_record("attention", w, "h100", b, t, us))
    return out


def _sel(sel: Any) -> dict[str, Any]:
    from hwtune.selector.ranks import digest

    return {"ok": True, "backend": sel.backend, "digest": digest(sel), "notes": list(sel.notes)}


def _a2a(db: str, **kw: Any) -> Any:
    import hwtune

    return hwtune.select_all2all(A2A, device="b200", assume_installed=True, db=db, **kw)


def _attn(db: str | bool, spec: AttentionSpec = ATTN, device: str = "h100", **kw: Any) -> Any:
    import hwtune

    return hwtune.select_attention(spec, device=device, assume_installed=True, db=db, **kw)


def _as_nccl(dist: Any, call: Callable[[], Any]) -> Any:
    """``call()`` while torch.distributed reports every group's backend as NCCL (an NCCL-only world)."""
    real = dist.get_backend
    dist.get_backend = lambda group=None: "nccl"
    try:
        return call()
    finally:
        dist.get_backend = real


def _nccl_world(rank: int, db: str, dist: Any) -> dict[str, Any]:
    from hwtune.selector import ranks

    out = _sel(_as_nccl(dist, lambda: _a2a(db)))
    made = ranks._GLOO.get("world")
    out["made_gloo_group"] = made is not None and made[1] is not None
    return out


def _nccl_subgroup(rank: int, db: str, dist: Any) -> Any:
    sub = dist.new_group(list(range(WORLD)), backend="gloo")  # collective over the world: every rank makes it
    return _as_nccl(dist, lambda: _a2a(db, group=sub))


def _warm(rank: int, db: str, dist: Any) -> dict[str, Any]:
    _a2a(db)
    t0 = time.perf_counter()
    for _ in range(5):
        sel = _a2a(db)
    out = _sel(sel)
    out["warm_ms"] = (time.perf_counter() - t0) / 5 * 1e3
    return out


#: name -> what each rank runs (rank, its store's URL, torch.distributed); run in this order on every rank.
SCENARIOS: dict[str, Callable[[int, str, Any], Any]] = {
    "local": lambda rank, db, dist: _a2a(db, distributed=False),
    "use_rank0": lambda rank, db, dist: _a2a(db),
    "warm": _warm,
    "raise": lambda rank, db, dist: _a2a(db, on_disagreement="raise"),
    "attention": lambda rank, db, dist: _attn(db),
    "attention_local": lambda rank, db, dist: _attn(db, distributed=False),
    "agree": lambda rank, db, dist: _attn(False),
    "rank0_fails": lambda rank, db, dist: _attn(False, MLA_HND, device="cpu" if rank == 0 else "h100"),
    "other_rank_fails": lambda rank, db, dist: _attn(False, MLA_HND, device="cpu" if rank == 2 else "h100"),
    "different_specs": lambda rank, db, dist: _attn(False, AttentionSpec(32, 8 if rank != 1 else 4, 128)),
    "different_modes": lambda rank, db, dist: _attn(False, on_disagreement="raise" if rank == 2 else "use_rank0"),
    "not_valid_on_a_rank": lambda rank, db, dist: _attn(False, device="cpu" if rank == 1 else "h100"),
    "explicit_group": lambda rank, db, dist: _a2a(db, group=dist.group.WORLD),
    "nccl_world": _nccl_world,
    "nccl_subgroup": _nccl_subgroup,
}


def worker(rank: int, world: int, tmp: str) -> None:
    """One rank: join the gloo group, run every scenario, write ``result-<rank>.json``."""
    import torch.distributed as dist

    results: dict[str, Any] = {}
    path = Path(tmp) / f"result-{rank}.json"
    dist.init_process_group(
        "gloo",
        init_method=f"file://{tmp}/rendezvous",
        rank=rank,
        world_size=world,
        timeout=_dt.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    try:
        db = f"sqlite:///{tmp}/rank{rank}.db"
        for name, scenario in SCENARIOS.items():
            try:
                got = scenario(rank, db, dist)
                results[name] = got if isinstance(got, dict) else _sel(got)
            except Exception as exc:
                results[name] = {"ok": False, "type": type(exc).__name__, "message": str(exc)}
                results[name]["traceback"] = traceback.format_exc(limit=4)
            path.write_text(json.dumps(results))  # what finished so far, should a later scenario hang
            dist.barrier()
    finally:
        path.write_text(json.dumps(results))
        dist.destroy_process_group()


def launch(tmp: Path, timeout_s: float = 240) -> list[dict[str, Any]]:
    """Write each rank's store, run ``WORLD`` ranks, and return each rank's results (a hang fails, naming it)."""
    from hwtune.db.store import Store

    for rank in range(WORLD):
        with Store.open(f"sqlite:///{tmp}/rank{rank}.db") as s:
            s.write(store_records(rank))
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(r, WORLD, str(tmp)), daemon=True) for r in range(WORLD)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for r in hung:
        os.kill(procs[r].pid, 9)
        procs[r].join(5)
    results = [json.loads(f.read_text()) if (f := tmp / f"result-{r}.json").exists() else {} for r in range(WORLD)]
    if hung:
        raise AssertionError(f"ranks {hung} still running after {timeout_s} s; finished scenarios: {results}")
    return results
