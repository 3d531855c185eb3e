"""Ranking from measurements: cost of each backend over the engine's workload mix.

Only measurements from this environment (same fingerprint hash) count; the others are listed in the notes
with what differs ("measured with flashinfer 0.6.11; installed is 0.6.18"). A crash or a wrong answer recorded
under another fingerprint therefore never rejects a backend here.

Within this fingerprint many hosts write the same store, and one of them may be faulty or hostile. The rules:

- Failures (``crashed``, ``wrong_answer``) are judged per candidate, that is per backend, tactic and workload.
  A backend is rejected with the evidence (host, date, message) unless exactly one host recorded failures of
  it and at every workload where it did, at least ``QUORUM - 1`` other hosts measured the same candidate
  correct (``QUORUM`` hosts in all). Then that single dissenting host is outvoted: the backend stays valid and
  the notes (``--explain``, JSON) name the host and what it recorded. Two or more failing hosts always reject;
  a failure that fewer than two other hosts contradict (with two hosts, or at a workload only that host
  measured) stands: fail closed, because a crash cannot be outvoted by silence. So a hostile host can veto a
  backend at a workload nobody else measured, never promote one; measuring that workload on two more hosts
  settles it.
- Timings: a shape's latency is the median over hosts of each host's median, so at shapes three hosts
  measured, one odd host cannot flip a choice two others agree on. Where a host measured shapes the others did
  not, its figure alone decides those shapes; so a host whose timings of a backend are more than
  ``DISCORDANT_FACTOR`` away from the hosts' median (median ratio over the shapes at least ``QUORUM`` hosts
  measured) is discordant: none of its timings of that backend are used, and the notes say so. A host that is
  honest where it can be checked and lies only where it cannot is not caught.

What the evidence then gives: a backend's latency at a shape (``hwtune.selector.interpolate``), its best tactic
per cell (``hwtune.selector.dispatch``), which backend wins over the mix (``hwtune.selector.decision``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from hwtune.core.environment import differences
from hwtune.core.records import DISQUALIFYING

#: Hosts of one fingerprint that must have measured a candidate before one host's failure of it is outvoted:
#: the dissenting host and at least two that measured the same backend, tactic and workload correct.
QUORUM = 3
#: A host whose timings of a backend are further than this factor from the hosts' median is discordant.
DISCORDANT_FACTOR = 2.0


@dataclass(frozen=True)
class Point:
    """One measured shape of one (backend, tactic, phase): the median over hosts of each host's median (so one odd
    host cannot flip a choice), and how many hosts' timings it counts (discordant hosts left out)."""

    batch: int
    context: int
    query_len: int
    latency_us: float
    hosts: int


@dataclass
class Evidence:
    """This environment's usable measurements of one spec, aggregated: timing points, backends rejected by
    measured failures (with their evidence), notes for people, and per-backend caveats for its rank's detail."""

    points: dict[tuple[str, str, str], list[Point]] = field(default_factory=dict)  # (backend, tactic, phase)
    disqualified: dict[str, list[str]] = field(default_factory=dict)
    #: The same failures by tactic (backend -> tactic -> facts), for an engine backend built on one tactic.
    disqualified_by_tactic: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    caveats: dict[str, list[str]] = field(default_factory=dict)  # backend -> short remarks ("see notes")
    #: Backends whose probe measures fewer phases than they serve (the catalogue's ``Probe.phases``: FLASHMLA and
    #: FLASH_ATTN_MLA decode only), with the phases measured: they are costed and compared on those phases alone.
    measured_phases: dict[str, frozenset[str]] = field(default_factory=dict)

    def backends(self) -> set[str]:
        """Backends with at least one usable (ok, this-environment) measurement."""
        return {b for b, _, _ in self.points}


@dataclass(frozen=True)
class _Row:
    """One store row of this environment: what one host recorded for one candidate on one workload."""

    backend: str
    tactic: str
    status: str
    median: float | None
    message: str
    host: str
    created: str
    workload: str  # canonical JSON of the workload: with backend and tactic, the candidate's identity
    shape: tuple[str, int, int, int] | None

    @property
    def candidate(self) -> tuple[str, str, str]:
        return self.backend, self.tactic, self.workload

    def failure(self) -> str:
        """The failure in words: what, where, which host, when, and the first line of its message."""
        where = f"{self.shape[0]} batch {self.shape[1]} x {self.shape[2]}" if self.shape else "a measured workload"
        first = self.message.splitlines()[0] if self.message else self.status
        what = "crashed" if self.status == "crashed" else "gave a wrong answer"
        return (
            f"{self.backend} tactic {self.tactic} {what} on {where} in this environment"
            f" (host {self.host}, {self.created[:10]}): {first}"
        )


def _shape(row: tuple) -> tuple[str, int, int, int] | None:
    """(phase, batch, context, query_len) of a store row; all2all uses tokens per rank as the batch."""
    kind, phase, batch, context, query_len, tokens, normalized = row[:7]
    if kind == "all2all":
        return "dispatch_combine", int(tokens), 1, 1
    ragged = (json.loads(normalized) if isinstance(normalized, str) else normalized or {}).get("context_lens")
    if phase not in ("decode", "prefill") or ragged:
        return None  # mixed batches and ragged lengths are measured, but are not mix points
    return str(phase), int(batch), int(context), int(query_len or 1)


def _named(row: tuple) -> _Row:
    backend, tactic, status, median, message, host, created = row[7:14]
    normalized = row[6]  # the stored text (one row per workload in the store), or a dict on the full path
    workload = normalized if isinstance(normalized, str) else json.dumps(normalized, sort_keys=True)
    return _Row(
        backend=backend,
        tactic=tactic,
        status=status,
        median=None if median is None else float(median),
        message=message or "",
        host=host or "",
        created=str(created),
        workload=workload,
        shape=_shape(row),
    )


def gather(rows: Iterable[tuple], fingerprints: Mapping[str, Mapping], env_hash: str, fingerprint: Mapping) -> Evidence:
    """Aggregate store rows (``hwtune.db.sqlite_direct`` column order) of one spec for this environment.

    Rows of other fingerprints only become notes. Failures reject a backend unless a single dissenting host is
    outvoted by a quorum of hosts that measured the same candidate correct; timings are medians over hosts, a
    discordant host's left out (module docstring).
    """
    ev = Evidence()
    here: list[_Row] = []
    foreign: dict[str, int] = defaultdict(int)
    for row in rows:
        if row[14] == env_hash:
            here.append(_named(row))
        else:
            foreign[row[14]] += 1
    _judge_failures(ev, here)
    _aggregate_timings(ev, here)
    _drop_covered(ev)
    _partial_phases(ev)
    for h, n in foreign.items():
        why = "; ".join(differences(fingerprints.get(h, {}), fingerprint)[:3]) or "a different environment"
        ev.notes.append(f"ignored {n} measurement(s) from another environment: {why}")
    return ev


def _partial_phases(ev: Evidence) -> None:
    """``Evidence.measured_phases`` of the measured backends, from the catalogue."""
    from hwtune.core import catalogue

    for backend in ev.backends():
        found = catalogue.find(backend)
        if found is not None and found.probe is not None and found.probe.phases is not None:
            ev.measured_phases[backend] = found.probe.phases


def _drop_covered(ev: Evidence) -> None:
    """At each shape where a tactic and one it covers (``Tactic.covers``: its search starts from that one's launch
    and keeps it unless another is faster) were both measured, the covered one's point leaves the evidence: the
    covering tactic is no slower there, and estimates of two near-equal tactics would otherwise pick between them by
    noise. Shapes only the covered tactic was measured at keep its points (a quick tune measures no ``tuned``)."""
    from hwtune.core import catalogue

    for backend, tactic, phase in list(ev.points):
        for covered in catalogue.covered(backend, tactic):
            key = (backend, covered, phase)
            if key not in ev.points:
                continue
            shapes = {(p.batch, p.context, p.query_len) for p in ev.points[(backend, tactic, phase)]}
            kept = [p for p in ev.points[key] if (p.batch, p.context, p.query_len) not in shapes]
            if kept:
                ev.points[key] = kept
            else:
                del ev.points[key]


def _judge_failures(ev: Evidence, here: list[_Row]) -> None:
    """Reject backends by their measured failures, or outvote a single dissenting host (module docstring)."""
    ok_hosts: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    failures: dict[str, dict[str, list[_Row]]] = defaultdict(lambda: defaultdict(list))  # backend -> host -> rows
    for r in here:
        if r.status == "ok":
            ok_hosts[r.candidate].add(r.host)
        elif r.status in DISQUALIFYING:
            failures[r.backend][r.host].append(r)
    for backend, by_host in failures.items():
        failing = set(by_host)
        rows = [r for host_rows in by_host.values() for r in host_rows]
        agree = {r.candidate: sorted(ok_hosts[r.candidate] - failing) for r in rows}
        standing = rows if len(failing) > 1 else [r for r in rows if len(agree[r.candidate]) < QUORUM - 1]
        if standing:
            ev.disqualified[backend] = [_rejection(r, agree[r.candidate], len(failing)) for r in standing]
            by_tactic = ev.disqualified_by_tactic.setdefault(backend, {})
            for r, fact in zip(standing, ev.disqualified[backend]):
                by_tactic.setdefault(r.tactic, []).append(fact)
        else:
            (host,) = failing
            ev.notes.append(_outvoted_note(backend, host, rows, agree))
            ev.caveats.setdefault(backend, []).append(f"failures recorded by host {host} outvoted (see notes)")


def _rejection(r: _Row, agree: list[str], n_failing: int) -> str:
    """Why a measured failure rejects its backend, with the hosts that contradicted it and how to settle it."""
    if not agree:
        return r.failure()
    who = f"host{'s' if len(agree) > 1 else ''} {', '.join(agree)} measured it correct there"
    if n_failing > 1:
        return f"{r.failure()}; {who}, but {n_failing} hosts recorded failures of {r.backend}: only one is outvoted"
    return (
        f"{r.failure()}; {who}, too few to outvote it: one host's failure is outvoted only where at least"
        f" {QUORUM - 1} other hosts of this environment measured the same workload correct (measure it on more"
        " hosts with hwtune tune)"
    )


def _outvoted_note(backend: str, host: str, rows: list[_Row], agree: Mapping[tuple, list[str]]) -> str:
    """The note that names a single dissenting host, what it recorded, and who outvoted it."""
    voters = sorted({h for r in rows for h in agree[r.candidate]})
    least = min(len(agree[r.candidate]) for r in rows)
    return (
        f"outvoted a single dissenting host: host {host} recorded {len(rows)} failure(s) of {backend}"
        f" (first: {rows[0].failure()}), but at each of those workloads at least {least} other hosts of this"
        f" environment ({', '.join(voters)}) measured the same candidate correct; one host of {QUORUM} or more is"
        f" not decisive, so {backend} stays valid. Check host {host} (GPU, driver, libraries) and measure again there"
    )


def _aggregate_timings(ev: Evidence, here: list[_Row]) -> None:
    """Timing points: per shape the median over hosts of each host's median, discordant hosts left out."""
    per_host: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in here:
        if r.status == "ok" and r.median is not None and r.shape is not None:
            per_host[(r.backend, r.tactic, *r.shape)][r.host].append(r.median)
    medians = {key: {h: statistics.median(v) for h, v in hosts.items()} for key, hosts in per_host.items()}
    discordant = _discordant(medians)
    for (backend, host), (factor, shared) in sorted(discordant.items()):
        alone = sum(1 for key, hosts in medians.items() if key[0] == backend and set(hosts) == {host})
        ev.notes.append(_discordant_note(backend, host, factor, shared, alone))
        ev.caveats.setdefault(backend, []).append(f"timings of host {host} not used (see notes)")
    for key, hosts in medians.items():
        kept = [m for h, m in hosts.items() if (key[0], h) not in discordant]
        if kept:
            ev.points.setdefault(key[:3], []).append(Point(*key[3:], statistics.median(kept), len(kept)))


def _discordant(medians: Mapping[tuple, Mapping[str, float]]) -> dict[tuple[str, str], tuple[float, int]]:
    """(backend, host) -> (median ratio of its timings to the hosts' median, shapes compared), for the hosts whose
    ratio is outside ``DISCORDANT_FACTOR``; compared only at shapes that at least ``QUORUM`` hosts measured."""
    logs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for key, hosts in medians.items():
        if len(hosts) < QUORUM:
            continue
        consensus = max(statistics.median(hosts.values()), 1e-9)
        for h, m in hosts.items():
            logs[(key[0], h)].append(math.log(max(m, 1e-9) / consensus))
    out = {}
    for backend_host, ls in logs.items():
        factor = math.exp(statistics.median(ls))
        if not 1 / DISCORDANT_FACTOR <= factor <= DISCORDANT_FACTOR:
            out[backend_host] = (factor, len(ls))
    return out


def _discordant_note(backend: str, host: str, factor: float, shared: int, alone: int) -> str:
    """The note that names a discordant host, by how much it differs, and what was left out."""
    how = f"{1 / factor:.3g}x faster than" if factor < 1 else f"{factor:.3g}x slower than"
    return (
        f"host {host}'s {backend} timings are not used: at the {shared} shape(s) that {QUORUM} or more hosts of this"
        f" environment measured they are {how} the hosts' median (hosts are trusted within a factor of"
        f" {DISCORDANT_FACTOR:g}), so its {alone} shape(s) that no other host measured are left out too."
        f" Check host {host} (clocks, power limit, other load) and measure again there"
    )
