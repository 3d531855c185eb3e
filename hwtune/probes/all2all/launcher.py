"""Spawn a fresh process group per trial and watch it: a hang or a crash on any rank ends the whole group.

Each rank is a ``python -m hwtune.probes.all2all.worker`` process started with ``start_new_session=True``,
so it leads its own process group and ``os.killpg`` also reaches anything it started (JIT compilers, say).
The watchdog polls the ranks and their JSON-lines result files:

* all ranks report a workload -> the next one gets a fresh deadline;
* no report within ``timeout_s`` -> every rank's group is killed -> ``timeout``;
* a rank dies by a signal, exits non-zero without reporting, or exits 0 without a result -> ``crashed``,
  naming the signal and the last lines of that rank's stderr. A crash outranks the errors its peers then
  report (a peer's "connection reset" is a consequence, not the cause);
* a rank reports an error and exits (its peers may be stuck in a collective) -> that error, after a short
  settling time for the others to report, and the group is killed. Whether the peers' own errors (their
  "connection reset" once it left) arrive within that time or not, the earliest report is the cause;
* a rank dies or hangs after every workload has its agreed result (final barrier, teardown) -> the
  results stand, each with a note naming the ranks that did not finish.

After a workload ended a group, the remaining workloads start in a new group; a failure during set-up
ends the backend's trial (every workload would meet it). Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hwtune
from hwtune.probes.all2all.trial import EXIT_REPORTED, ItemResult, TrialOutcome, TrialSpec
from hwtune.probes.contract import NO_MULTICAST_ENV, shared_compile_cache, signal_name, stderr_tail

POLL_S = 0.05


def free_port() -> int:
    """A TCP port that is free on localhost when asked, for a new group's rendezvous (nothing reserves it until the
    ranks bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(extra: Mapping[str, str] | None, device: str) -> dict[str, str]:
    """The ranks' environment: ours plus ``extra``, hwtune importable, unbuffered output, and NVLink multicast off
    whatever the caller asked (it is applied last)."""
    env = dict(os.environ)
    env.update(shared_compile_cache())
    env.update(NO_MULTICAST_ENV)
    root = str(Path(hwtune.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if device == "cpu":
        env.setdefault("OMP_NUM_THREADS", "1")
    for key, value in (extra or {}).items():
        if key == "PYTHONPATH":
            env[key] = os.pathsep.join(p for p in (value, env[key]) if p)
        else:
            env[key] = value
    env.update(NO_MULTICAST_ENV)  # never let a caller turn multicast back on
    return env


def peek_exit(proc: subprocess.Popen) -> int | None:
    """The process's exit status (negative: killed by that signal) without reaping it, or None if running.

    Not reaping keeps the pid, and so the process-group id, reserved until the group has been killed:
    ``os.killpg`` can then never reach a group that reused the number.
    """
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # already reaped
        return proc.returncode
    if info is None:
        return None
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


class _Lines:
    """Complete JSON lines appended to a file since the last read (a partial last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path, self.pos, self.buf = path, 0, b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return []
        self.pos += len(data)
        self.buf += data
        *complete, self.buf = self.buf.split(b"\n")
        out = []
        for raw in complete:
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue  # not ours: never trust, never execute
        return out


@dataclass
class _Rank:
    proc: subprocess.Popen
    lines: _Lines
    err: Path
    results: dict[int, dict[str, Any]] = field(default_factory=dict)
    ready: bool = False
    setup_ok: bool = False
    done: bool = False
    exit: int | None = None
    exit_seen: float = 0.0


@dataclass
class _GroupResult:
    completed: list[ItemResult]
    failed: ItemResult | None = None
    setup_failed: bool = False
    pids: list[int] = field(default_factory=list)


def _kill(ranks: list[_Rank]) -> None:
    """SIGKILL every rank's process group, then reap the ranks (they are unreaped until here)."""
    for r in ranks:
        if r.proc.returncode is not None:
            continue  # reaped already: its group id may belong to someone else now
        try:
            os.killpg(r.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for r in ranks:
        try:
            r.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _where(r: _Rank, index: int) -> str:
    if not r.ready:
        return "during start-up (process-group rendezvous)"
    if not r.setup_ok:
        return "during the candidate's set-up"
    return f"during workload {index}"


def _crash(rank: int, r: _Rank, index: int) -> ItemResult:
    rc = r.exit
    assert rc is not None
    if rc < 0:
        what = f"rank {rank} was killed by signal {-rc} ({signal_name(-rc)})"
    elif rc == 0:
        what = f"rank {rank} exited (code 0) without a result"
    else:
        what = f"rank {rank} exited with code {rc} without a result"
    tail = stderr_tail(r.err)
    msg = f"{what} {_where(r, index)}" + (f"; last lines of its stderr:\n{tail}" if tail else "; its stderr is empty")
    return ItemResult("crashed", msg, extra={"rank": rank, "exit_code": rc, "stderr_tail": tail})


def _first_failure(reports: list[dict[str, Any]]) -> ItemResult:
    """The earliest failure report (by the time its rank wrote it): the cause, not its consequences.

    A rank that fails writes its result and exits; only then can a peer waiting on it (in a collective,
    or still in the rendezvous on the store rank 0 hosts) fail too, with "connection reset by peer", so the
    cause is always written first, whatever order the watchdog happens to read the files in.
    """
    return ItemResult.from_dict(min(reports, key=lambda line: line.get("t", 0.0)))


def _agreed(results: list[dict[str, Any]]) -> ItemResult:
    """One workload's outcome once every rank has reported it.

    Any failure decides (ranks that failed later failed because of it); only passing verdicts that differ,
    ``ok`` on one rank and ``wrong_answer`` on another, are a real disagreement.
    """
    failures = [r for r in results if r["status"] not in ("ok", "wrong_answer")]
    if failures:
        return _first_failure(failures)
    statuses = [r["status"] for r in results]
    if len(set(statuses)) == 1:
        return ItemResult.from_dict(results[0])
    said = ", ".join(f"rank {i} {s}" for i, s in enumerate(statuses))
    return ItemResult(
        "error",
        f"ranks disagreed about the outcome ({said}); a trial needs every rank to agree",
        extra={"statuses": statuses},
    )


def _run_group(spec: TrialSpec, timeout_s: float, env: Mapping[str, str] | None, settle_s: float) -> _GroupResult:
    tmp = Path(tempfile.mkdtemp(prefix="hwtune-a2a-"))
    spec = spec.with_port(free_port())
    (tmp / "spec.json").write_text(spec.to_json())
    ranks: list[_Rank] = []
    environ = child_env(env, spec.device)
    try:
        for rank in range(spec.world_size):
            with open(tmp / f"rank{rank}.out", "wb") as out, open(tmp / f"rank{rank}.err", "wb") as err:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "hwtune.probes.all2all.worker",
                        str(tmp / "spec.json"),
                        str(tmp),
                        str(rank),
                    ],
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    env=environ,
                    start_new_session=True,
                )
            ranks.append(_Rank(proc, _Lines(tmp / f"rank{rank}.jsonl"), tmp / f"rank{rank}.err"))
        return _watch(spec, ranks, timeout_s, settle_s)
    finally:
        _kill(ranks)
        if not os.environ.get("HWTUNE_KEEP_TRIAL_DIRS"):
            shutil.rmtree(tmp, ignore_errors=True)


def _after_last(res: _GroupResult, ranks: list[_Rank]) -> _GroupResult:
    """Every workload has its agreed result, but not every rank finished (it died or hung in the final
    barrier or teardown).

    That cannot change results every rank already agreed on, and there is no workload to charge it to, so
    it becomes a note on the results. Which rank went first cannot be told once a peer's consequential
    failure lands in the same poll, so the note names every rank that did not finish and how it ended.
    """
    said = []
    for i, r in enumerate(ranks):
        if r.done:
            continue
        rc = r.exit
        if rc is None:
            how = "had not finished and was killed"
        elif rc < 0:
            how = f"was killed by signal {-rc} ({signal_name(-rc)})"
        else:
            how = f"exited with code {rc}"
        said.append(f"rank {i} {how}")
    note = "after every workload had its result, not every rank finished: " + ", ".join(said)
    for item in res.completed:
        item.extra["after_last_workload"] = note
    return res


def _watch(spec: TrialSpec, ranks: list[_Rank], timeout_s: float, settle_s: float) -> _GroupResult:
    n = len(spec.items)
    res = _GroupResult(completed=[], pids=[r.proc.pid for r in ranks])
    current = 0
    deadline = time.monotonic() + timeout_s
    trouble_since: float | None = None
    while True:
        for r in ranks:
            for line in r.lines.read():
                ev = line.get("event")
                r.ready |= ev == "ready"
                r.setup_ok |= ev == "setup_ok" or (spec.mode == "peak" and ev == "ready")
                r.done |= ev == "done"
                if ev == "result" and isinstance(line.get("i"), int):
                    r.results.setdefault(line["i"], line)
            if r.exit is None:
                r.exit = peek_exit(r.proc)
                r.exit_seen = time.monotonic()
        while current < n and all(current in r.results for r in ranks):
            item = _agreed([r.results[current] for r in ranks])
            if item.status not in ("ok", "wrong_answer"):
                res.failed, res.setup_failed = item, not all(r.setup_ok for r in ranks)
                return res
            res.completed.append(item)
            current += 1
            deadline = time.monotonic() + timeout_s
        if current == n and all(r.done for r in ranks):
            end = time.monotonic() + settle_s
            while time.monotonic() < end and any(peek_exit(r.proc) is None for r in ranks):
                time.sleep(POLL_S)
            return res
        ended = [r for r in ranks if r.exit is not None and not (r.exit == 0 and r.done)]
        if ended and trouble_since is None:
            trouble_since = time.monotonic()
        if trouble_since is not None and time.monotonic() - trouble_since >= settle_s:
            if current == n:
                return _after_last(res, ranks)
            crashed = [
                (i, r)
                for i, r in enumerate(ranks)
                if r.exit is not None
                and not (r.exit == 0 and r.done)
                and not (r.exit == EXIT_REPORTED and current in r.results)
            ]
            if crashed:  # the first rank seen to die is the cause; the others' deaths are consequences
                first = min(crashed, key=lambda c: c[1].exit_seen)
                res.failed = _crash(first[0], first[1], current)
            else:
                res.failed = _first_failure([r.results[current] for r in ranks if current in r.results])
            res.setup_failed = not all(r.setup_ok for r in ranks)
            return res
        if time.monotonic() > deadline:
            if current == n:
                return _after_last(res, ranks)
            waiting = [i for i, r in enumerate(ranks) if current not in r.results]
            tails = {i: stderr_tail(ranks[i].err, lines=5) for i in waiting}
            where = _where(ranks[waiting[0]], current) if waiting else f"during workload {current}"
            res.failed = ItemResult(
                "timeout",
                f"no result within {timeout_s:g} s {where}; ranks {', '.join(map(str, waiting))} did not "
                "report, so every rank's process group was killed",
                extra={"waiting_ranks": waiting, "stderr_tail": tails},
            )
            res.setup_failed = not all(r.setup_ok for r in ranks)
            return res
        time.sleep(POLL_S)


def run_trial(
    spec: TrialSpec,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    settle_s: float = 1.0,
    max_consecutive_failures: int = 2,
) -> TrialOutcome:
    """Run every workload of ``spec``; one ``ItemResult`` per workload, in order."""
    t0 = time.monotonic()
    results: list[ItemResult | None] = [None] * len(spec.items)
    out = TrialOutcome(results=[])
    start, failures = 0, 0
    while start < len(spec.items):
        group = _run_group(spec.with_items(spec.items[start:]), timeout_s, env, settle_s)
        out.groups_spawned += 1
        out.pids.extend(group.pids)
        for j, item in enumerate(group.completed):
            results[start + j] = item
        if group.failed is None:
            break
        at = start + len(group.completed)
        results[at] = group.failed
        failures = failures + 1 if not group.completed else 1
        rest = range(at + 1, len(spec.items))
        if group.setup_failed and rest:
            for k in rest:
                results[k] = ItemResult(
                    group.failed.status,
                    group.failed.message,
                    extra={**group.failed.extra, "same_failure_as_workload": at},
                )
            break
        if failures >= max_consecutive_failures and rest:
            for k in rest:
                results[k] = ItemResult(
                    "error",
                    f"not measured: the {failures} workloads before it each ended the process group "
                    f"(last: {group.failed.status}: {group.failed.message.splitlines()[0]})",
                )
            break
        start = at + 1
    out.results = [
        r if r is not None else ItemResult("error", "not measured (internal: no result recorded)") for r in results
    ]
    out.wall_s = time.monotonic() - t0
    return out
