"""``hwtune tune``: measure a plan's workloads on this node and store every result as soon as it exists.

The plan's items go through the store's work queue, keyed by the plan's digest and the environment
fingerprint, so that (a) a run stopped at any point (Ctrl-C, SIGKILL, node loss) continues with
``--resume`` without repeating finished work, and (b) several nodes with the same fingerprint that run the
same plan against one PostgreSQL store share it: each claims items under a lease kept alive by a heartbeat,
and a dead node's items are reclaimed when its lease runs out. Within an item, candidates already stored
for this plan are skipped, so a reclaimed item adds no duplicate rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from hwtune.core.devices import CPU_PROFILE, DeviceProfile
from hwtune.core.environment import Environment, current_environment
from hwtune.core.errors import InvalidSpecError
from hwtune.core.records import MeasurementRecord
from hwtune.core.result_store import ResultStore
from hwtune.core.types import All2AllWorkload, AttentionWorkload
from hwtune.db.queue import holder_is_gone, worker_id
from hwtune.probes.attention.measure import measure_attention
from hwtune.probes.attention.worker import WorkerPool
from hwtune.probes.timing import TimingOptions
from hwtune.tuner.options import TuneOptions
from hwtune.tuner.plan import Plan, PlanItem, kv_fits
from hwtune.tuner.schedule import PRUNE_FACTOR, bisections, narrowed, order_refinements, pruned


@dataclass
class TuneReport:
    """What a tuning run did: ids, items done and skipped for budget, records written per status, compile times,
    elapsed time and final state."""

    plan_id: str
    run_id: str
    environment_hash: str
    device: str
    items_done: int = 0
    items_skipped_budget: int = 0
    records: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    compile_s: dict[str, float] = field(default_factory=dict)
    #: Wall seconds of the JIT warm-up, and of measuring each backend (inputs, gate, compile and timing: per job).
    warmup_s: float = 0.0
    backend_s: dict[str, float] = field(default_factory=dict)
    elapsed_s: float = 0.0
    state: str = "running"
    notes: list[str] = field(default_factory=list)

    @property
    def measured_nothing(self) -> bool:
        """A finished run that wrote records of which none is a timed, correct result: a failure."""
        return self.state == "done" and self.records > 0 and not self.statuses.get("ok")


Progress = Callable[[str, int, int, str], None]  # (event, done, total, message)


def plan_queue_id(plan: Plan, env: Environment, backends: tuple[str, ...] | None = None) -> str:
    """The work-queue id of a plan in an environment, for the run's ``--backends``: nodes that share all three
    share the queue; a different environment never picks up another's items, and a run that narrows to other
    backends is not taken for one already done."""
    narrowed = "" if not backends else "-" + hashlib.sha256(",".join(sorted(backends)).encode()).hexdigest()[:8]
    return f"{plan.digest()}-{env.hash()[:12]}{narrowed}"


class Tuner:
    """Measures a plan's items through the store's work queue (see the module docstring)."""

    def __init__(
        self,
        plan: Plan,
        store: ResultStore,
        options: TuneOptions | None = None,
        profile: DeviceProfile | None = None,
        progress: Progress | None = None,
    ) -> None:
        from hwtune.core.detect import detect

        options = options or TuneOptions()
        options.check()
        self.plan, self.store, self.opts = plan, store, options
        detected = profile or detect()
        self.device = options.device if options.device != "auto" else ("cuda" if detected.is_cuda else "cpu")
        self.profile = detected if self.device == "cuda" else CPU_PROFILE
        self.env = current_environment(self.profile)
        self.progress = progress or (lambda *a: None)
        self.worker = worker_id()
        self.timing = dataclasses.replace(TimingOptions(), time_cap_s=options.time_cap_s or plan.time_cap_s)
        self._held: set[str] = set()
        self._notes: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._items: dict[str, PlanItem] = {i.key: i for i in plan.items}
        self._pruned_counts: Counter[str] = Counter()
        self._refused: dict[str, frozenset[tuple[str, str]]] = {}

    # --- the queue ------------------------------------------------------------------------------------

    def _queue_id(self) -> str:
        """The queue this run works on. A plan already started here is continued with --resume or joined while
        another live process works on it (the work is split); otherwise the error says what to do."""
        base = plan_queue_id(self.plan, self.env, self.opts.backends)
        state = self.store.queue_state(base)
        started = sum(v for k, v in state.items() if k != "pending")
        if self.opts.fresh:
            return f"{base}-{uuid.uuid4().hex[:8]}"
        if started and not self.opts.resume:
            live = self._take_over_gone(base)
            if live:
                holders = ", ".join(sorted({w for _, w, _ in live}))
                self._notes.append(
                    f"joined a run of this plan in progress ({len(live)} item(s) held by {holders}): the work is split"
                )
                return base
            raise InvalidSpecError(
                f"this plan was already run in this environment ({state.get('done', 0)} of "
                f"{sum(state.values())} items done, queue {base}) and no process is running it now; add --resume "
                "to measure only what is missing, or --fresh to measure everything again"
            )
        return base

    def _take_over_gone(self, queue_id: str) -> list[tuple[str, str, float]]:
        """Return to the queue the items held by processes of this host that are gone (at once: no lease wait),
        and say so in the report's notes; returns the claims other live workers still hold."""
        claims = [c for c in self.store.claims(queue_id) if c[1] != self.worker]
        gone = [(key, worker) for key, worker, _ in claims if holder_is_gone(worker)]
        if gone:
            released = self.store.release(queue_id, gone)
            holders = ", ".join(sorted({w for _, w in gone}))
            self._notes.append(f"took over {released} item(s) of {holders}: that process is gone")
        return [c for c in claims if (c[0], c[1]) not in set(gone)]

    def _heartbeat(self, queue_id: str) -> None:
        while not self._stop.wait(self.opts.lease_s / 3):
            with self._lock:
                held = sorted(self._held)
            if held:
                try:
                    self.store.heartbeat(queue_id, self.worker, held, self.opts.lease_s)
                except Exception:  # a missed heartbeat only shortens the lease; the next one retries
                    pass

    # --- measuring one item ---------------------------------------------------------------------------

    def _already(self, key: str, queue_id: str) -> set[tuple[str, str]]:
        done = self.store.measurements(workload_keys=[key], environment_hash=self.env.hash())
        return {(r.backend, r.tactic) for r in done if (r.extra or {}).get("plan_id") == queue_id}

    def _measure(self, item: PlanItem, queue_id: str, run_id: str, pool: WorkerPool, report: TuneReport) -> None:
        skip = self._already(item.key, queue_id)
        backends = narrowed(item, self.opts.backends or self.plan.backends)

        def store(rec: MeasurementRecord) -> None:
            rec.extra = {**dict(rec.extra or {}), "plan_id": queue_id}
            self.store.write([rec])
            report.records += 1
            report.statuses[rec.status] = report.statuses.get(rec.status, 0) + 1
            wall = (rec.extra or {}).get("wall_s")
            if wall:
                report.backend_s[rec.backend] = report.backend_s.get(rec.backend, 0.0) + float(wall)
            if rec.compile_time_s:
                name = f"{rec.backend}/{rec.tactic}"
                report.compile_s[name] = max(report.compile_s.get(name, 0.0), rec.compile_time_s)

        w = item.workload
        if isinstance(w, AttentionWorkload):
            skip = skip | self._pruned(item)
            planned = [c for c in self.plan.candidates(w, self.profile, backends) if (c.backend, c.tactic) not in skip]
            measure_attention(
                w,
                planned,
                device=self.device,
                profile=self.profile,
                timing=self.timing,
                timeout_s=self.opts.timeout_s,
                run_id=run_id,
                pool=pool,
                seed=self.opts.seed,
                on_record=store,
            )
        else:
            from hwtune.core import catalogue
            from hwtune.probes.all2all.measure import measure_all2all

            assert isinstance(w, All2AllWorkload)
            known = catalogue.names("all2all")
            names = [b for b in ([b for b in backends or () if b in known] or known) if (b, "default") not in skip]
            named = [b for b in item.backends or self.opts.backends or () if b in known]  # by a person, by name
            for rec in measure_all2all(
                w,
                names,
                device=self.device,
                timeout_s=self.opts.timeout_s,  # type: ignore[arg-type]
                time_cap_s=self.timing.time_cap_s,
                environment=self.env,
                run_id=run_id,
                named=named,
            ):
                store(rec)

    # --- the run --------------------------------------------------------------------------------------

    def run(self) -> TuneReport:
        """Measure every item of the plan (coarse grid first, then refinements ordered by where backends
        cross over), storing each record as soon as it exists; returns what happened."""
        queue_id = self._queue_id()
        run_id = self.store.start_run(plan={**self.plan.to_dict(), "queue_id": queue_id}, budget_s=self.opts.budget_s)
        self.store.enqueue(queue_id, [(i.key, i.to_dict()) for i in self.plan.items if i.level == 0])
        self._take_over_gone(queue_id)
        report = TuneReport(queue_id, run_id, self.env.hash(), self.profile.describe(), notes=list(self.plan.notes))
        report.notes += self._notes
        started = time.monotonic()
        threading.Thread(target=self._heartbeat, args=(queue_id,), daemon=True).start()
        pool = WorkerPool()
        try:
            if self.opts.warmup and self.device == "cuda":
                from hwtune.tuner.warmup import warm_up

                pool.prestart()  # the measuring worker starts up while the kernels compile
                warm_started = time.monotonic()
                report.compile_s.update(
                    warm_up(
                        self.plan,
                        self.profile,
                        self.opts.backends or self.plan.backends,
                        parallel=self.opts.warmup_parallel,
                        progress=self.progress,
                        notes=report.notes,
                    )
                )
                report.warmup_s = time.monotonic() - warm_started
            self._work(queue_id, run_id, report, started, pool)
            if report.state == "running":
                report.state = "done"
            if self._pruned_counts:
                left = ", ".join(f"{c} at {n}" for c, n in sorted(self._pruned_counts.items()))
                report.notes.append(
                    f"not measured where they were {PRUNE_FACTOR:g}x or more slower than the best, or failed, at every"
                    f" measured neighbour (a coarse point: at its twin in the other KV layout too): {left} point(s)"
                )
        except KeyboardInterrupt:
            report.state = "interrupted"
            report.notes.append("interrupted: measured results are stored; continue with --resume")
        finally:
            pool.close()
            self._stop.set()
            report.elapsed_s = time.monotonic() - started
            try:
                self.store.finish_run(run_id, report.state)
            except Exception:  # the report still says what happened; the run row stays "running"
                pass
        failed = self.store.queue_state(queue_id).get("failed", 0)
        if failed:
            report.notes.append(
                f"{failed} item(s) failed repeatedly (their workers died each time): see `hwtune show --status crashed`"
            )
        return report

    def _work(self, queue_id: str, run_id: str, report: TuneReport, started: float, pool: WorkerPool) -> None:
        """Claim and measure items in ``pool``'s worker until the queue is empty or the budget is spent."""
        items = self._items = {i.key: i for i in self.plan.items}
        refine = [i for i in self.plan.items if i.level > 0]
        durations: list[float] = []
        while not self._budget_spent(queue_id, report, started, durations):
            claimed = self.store.claim(queue_id, self.worker, 1, self.opts.lease_s)
            if not claimed:
                if refine:
                    self._enqueue_refinements(queue_id, refine)
                    refine = []
                    continue
                if self.store.queue_state(queue_id).get("claimed", 0):  # others still work, or are gone
                    self._wait_for_others(queue_id, report, len(items))
                    continue
                if self._enqueue_bisections(queue_id, items, report):
                    continue
                return
            key, payload = claimed[0]
            item = items.get(key) or PlanItem.from_dict(payload)
            t0 = time.monotonic()
            self._measure_claimed(item, queue_id, run_id, pool, report, len(items))
            durations.append(time.monotonic() - t0)

    def _measured(self, items: Iterable[PlanItem]) -> list[MeasurementRecord]:
        """This environment's records of ``items``, less those of candidates this plan refuses at their workload: a
        store written under older rules (before the layer-kind rule, a backend timed on the layers it can serve) must
        not make a backend this run records unsupported look like a winner or a contender to bisection and pruning."""
        items = list(items)
        done = self.store.measurements(workload_keys=[i.key for i in items], environment_hash=self.env.hash())
        refused = {i.key: self._refused_at(i) for i in items}
        return [r for r in done if (r.backend, r.tactic) not in refused.get(r.workload_key, ())]

    def _refused_at(self, item: PlanItem) -> frozenset[tuple[str, str]]:
        """The (backend, tactic) pairs the plan records unsupported at ``item`` whatever ``--backends`` says
        (cached: the catalogue's answer does not change during a run)."""
        if item.key not in self._refused:
            w = item.workload
            planned = self.plan.candidates(w, self.profile, None) if isinstance(w, AttentionWorkload) else []
            self._refused[item.key] = frozenset((c.backend, c.tactic) for c in planned if not c.runnable)
        return self._refused[item.key]

    def _pruned(self, item: PlanItem) -> frozenset[tuple[str, str]]:
        """The candidates ``schedule.pruned`` leaves out at ``item``, counted for the report."""
        others = [i for i in self._items.values() if i.key != item.key]
        left_out = pruned(item, others, self._measured(others))
        with self._lock:
            for backend, tactic in left_out:
                self._pruned_counts[f"{backend}/{tactic}"] += 1
        return left_out

    def _wait_for_others(self, queue_id: str, report: TuneReport, total: int) -> None:
        """Take over items of gone processes of this host at once; otherwise say whose items the run waits for and
        how long their leases last (they return to the queue then unless renewed), and wait a little."""
        before = len(self._notes)
        live = self._take_over_gone(queue_id)
        if len(self._notes) > before:
            report.notes += self._notes[before:]
            return
        if live:
            holders = ", ".join(sorted({w for _, w, _ in live}))
            left = max(0.0, max(s for _, _, s in live))
            self.progress(
                "wait",
                report.items_done,
                total,
                f"waiting for {len(live)} item(s) held by {holders}: their lease ends in {left:.0f} s unless renewed",
            )
        time.sleep(min(0.5, self.opts.lease_s / 10))  # short: this is the plan's tail

    def _budget_spent(self, queue_id: str, report: TuneReport, started: float, durations: list[float]) -> bool:
        """True (with the report saying so) when the next item would not fit in the budget."""
        if self.opts.budget_s is None:
            return False
        elapsed = time.monotonic() - started
        estimate = (sum(durations) / len(durations)) if durations else 0.0
        if elapsed + estimate <= self.opts.budget_s:
            return False
        report.items_skipped_budget = self.store.queue_state(queue_id).get("pending", 0)
        report.notes.append(
            f"budget of {self.opts.budget_s / 60:.1f} min reached after {elapsed / 60:.1f} min; "
            f"{report.items_skipped_budget} item(s) left pending (continue with --resume)"
        )
        report.state = "interrupted"
        return True

    def _enqueue_refinements(self, queue_id: str, refine: list[PlanItem]) -> None:
        """Queue the refinement items, where the coarse results say backends or tactics cross over first."""
        coarse = [i for i in self.plan.items if i.level == 0]
        done = self.store.measurements(workload_keys=[i.key for i in coarse], environment_hash=self.env.hash())
        ordered = order_refinements(refine, coarse, done)
        self.store.enqueue(queue_id, [(i.key, i.to_dict()) for i in ordered])

    def _enqueue_bisections(self, queue_id: str, items: dict[str, PlanItem], report: TuneReport) -> bool:
        """Queue the points that locate the crossovers left between measured neighbours (``schedule.bisections``);
        False when there are none. Every node computes the same items from the store, so they share them."""
        if not self.opts.bisect:
            return False
        new = bisections(
            list(items.values()), self._measured(items.values()), fits=lambda i: kv_fits(i.workload, self.profile)
        )
        if not new:
            return False
        items.update({i.key: i for i in new})
        report.notes.append(f"measured {len(new)} point(s) between neighbours whose winners differ")
        self.store.enqueue(queue_id, [(i.key, i.to_dict()) for i in new])
        return True

    def _measure_claimed(
        self, item: PlanItem, queue_id: str, run_id: str, pool: WorkerPool, report: TuneReport, total: int
    ) -> None:
        """Measure one claimed item under its lease and mark it complete."""
        with self._lock:
            self._held.add(item.key)
        self.progress("start", report.items_done, total, describe_item(item))
        try:
            self._measure(item, queue_id, run_id, pool, report)
            self.store.complete(queue_id, item.key, True, self.worker)
        finally:
            with self._lock:
                self._held.discard(item.key)
        report.items_done += 1
        self.progress("done", report.items_done, total, describe_item(item))


def describe_item(item: PlanItem) -> str:
    """One line naming a plan item, for progress and dry runs."""
    w = item.workload
    if isinstance(w, AttentionWorkload):
        q = f" q{w.query_len}" if w.phase != "decode" else ""
        layout = f" {w.spec.kv_layout}" if w.spec.kv_layout != "auto" else ""
        block = f" block {w.spec.block_size}" if w.spec.block_size not in (None, 16) else ""
        only = f" ({', '.join(item.backends)})" if item.backends and not item.contenders else ""
        return f"attention {w.phase} b{w.batch} ctx{w.context_len}{q}{layout}{block}{only}"
    return f"all2all ep{w.spec.ep_size} {w.spec.quant_dtype} {w.tokens_per_rank} tok/rank"  # type: ignore[union-attr]
