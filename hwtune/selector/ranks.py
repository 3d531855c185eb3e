"""Ranks agree: every rank of a torch.distributed process group gets the same backend choice.

Each rank of a tensor- or expert-parallel engine calls ``select_attention`` / ``select_all2all`` at start, and
each may read a different store (a node-local SQLite cache, a shared store one node cannot reach), see another
device, or carry another ``HWTUNE_*_BACKEND``. Ranks that choose differently run different kernels in one
collective computation: at best a hang, at worst silently wrong numbers. So, when a process group is
initialised, the call is collective and settles one answer for the whole group.

Design, and why:

1. **Every rank selects locally first** (validation, its own store, the process-wide cache), exactly as
   without a group. A failure is caught rather than raised, so that every rank still reaches the collective.
2. **One small all-gather** (``all_gather_object``) of each rank's *outcome*: ok or the error's text, the
   question (kind and spec), a digest of the decision, a one-line summary of the choice, and the names of the
   backends valid on that rank. A few hundred bytes a rank, so warm calls stay cheap. The digest covers all
   that drives the engine: backend, tactic per phase, per-phase backends and the per-step dispatch table
   (phase, batch and context bucket, tactic; latency estimates are left out, they drive nothing).
3. **Every rank settles the same way from the same gathered list**, so they all take the same branch: the
   next collective (if any) is then called by all ranks or by none, and no rank waits forever.

   - a rank failed: every rank raises; a failed rank its own error (as it would alone), the others
     ``RanksDisagreeError`` naming the failed ranks and their errors (rank 0 failing while others succeed is
     thus a clear error everywhere, never a hang);
   - the ranks asked different questions (another kind or spec): ``RanksDisagreeError``, whatever the mode;
   - all digests equal: each rank keeps its own Selection (same decision), with a note that the ranks agree;
   - digests differ and rank 0's backend is not valid on some rank: ``RanksDisagreeError`` (adopting it would
     fail there);
   - digests differ, ``on_disagreement="raise"``: ``RanksDisagreeError`` with each rank's choice;
   - digests differ, ``on_disagreement="use_rank0"`` (default): rank 0's whole Selection is broadcast
     (``broadcast_object_list``) and every rank returns it; a rank whose own answer differed logs a warning
     and says in the Selection's notes what it would have chosen and what differed.

   Rank 0 decides rather than, say, the fastest claim winning: it is the rank engines already treat as the
   leader, its answer explains itself, and the rule is predictable.

Collective contract. With a group initialised, every rank of ``group`` must make the same sequence of
selection calls (the local cache cannot be trusted to be warm on every rank alike, so every call runs the
all-gather; the warm cost is one small collective). ``distributed=False`` opts out (for example when only
one rank selects and shares the answer itself). A rank that never calls makes the others fail after the
group's timeout (torch's default for gloo: 30 minutes), never wait forever.

CUDA. Object collectives over an NCCL group need a CUDA device, and the selector never initialises CUDA. A
group that can carry CPU tensors (gloo, MPI, UCC, or a ``"cpu:gloo,cuda:nccl"`` default group) is used as
is. For an NCCL-only default group hwtune creates one gloo group over the world, once per process
(``new_group`` is collective over the world, and this call already is). An NCCL-only *subgroup* passed as
``group`` is refused with the way out (pass a gloo group): creating a group needs every rank of the world,
which a subgroup's call does not have.

Lightness. torch.distributed is consulted only when the engine has already imported it
(``sys.modules``): an engine that never imported torch pays nothing and imports nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import sys
from typing import Any, Callable, Mapping

from hwtune.core.errors import HwtuneError
from hwtune.selector.selection import Selection

log = logging.getLogger(__name__)

#: What a rank does when its own answer differs from rank 0's.
ON_DISAGREEMENT = ("use_rank0", "raise")

#: Backends whose groups carry CPU tensors, so object collectives need no CUDA device.
_CPU_BACKENDS = ("gloo", "mpi", "ucc")

#: The gloo group hwtune made over an NCCL-only world: {"world": (world group, gloo group)}.
_GLOO: dict[str, tuple[Any, Any]] = {}

#: Warnings this process has logged already.
_WARNED: set[str] = set()


class RanksDisagreeError(HwtuneError):
    """The ranks of a process group could not settle one backend choice; every rank raises it (or its own
    error) so that none waits for the others. ``choices`` maps each rank to its choice or its error."""

    exit_code = 3

    def __init__(self, message: str, choices: Mapping[int, str]) -> None:
        self.choices = dict(choices)
        super().__init__(message)


def initialised_dist() -> Any | None:
    """``torch.distributed`` when the process already imported it and a default group is initialised, else
    None. Never imports torch."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def decision(sel: Selection) -> dict[str, Any]:
    """What in ``sel`` drives the engine: backend, tactic per phase, per-phase backends, KV layout, dispatch cells
    (the chosen backend's and the routed phases')."""
    return {
        "backend": sel.backend,
        "tactics": dict(sel.tactics),
        "per_phase": dict(sel.per_phase),
        "kv_layout": sel.spec.get("kv_layout"),
        "dispatch": sorted([e.phase, e.batch_max, e.context_max, e.tactic] for e in sel.dispatch),
        "phase_dispatch": sorted([e.phase, e.batch_max, e.context_max, e.tactic] for e in sel.phase_dispatch),
    }


def digest(sel: Selection) -> str:
    """A stable hash of ``decision(sel)``: equal digests mean the engine would run the same kernels."""
    text = json.dumps(decision(sel), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def describe(sel: Selection) -> str:
    """One line for people: backend, tactic per phase, and the per-phase backends when they differ from it."""
    tactics = ", ".join(f"{p}: {t}" for p, t in sel.tactics.items())
    phases = {p: b for p, b in sel.per_phase.items() if b != sel.backend}
    extra = f"; per phase {', '.join(f'{p} -> {b}' for p, b in phases.items())}" if phases else ""
    return f"{sel.backend} ({tactics}{extra})"


def agree(
    local: Callable[[], Selection],
    *,
    distributed: bool = True,
    group: Any = None,
    on_disagreement: str = "use_rank0",
) -> Selection:
    """``local()``'s Selection, settled across the ranks of ``group`` (default: the world) when torch.distributed
    is initialised and ``distributed`` is true; collective then (see the module docstring)."""
    if on_disagreement not in ON_DISAGREEMENT:
        raise ValueError(
            f"on_disagreement={on_disagreement!r} is not one of {', '.join(map(repr, ON_DISAGREEMENT))}: "
            "'use_rank0' makes every rank use rank 0's choice, 'raise' fails every rank when they differ"
        )
    dist = initialised_dist() if distributed else None
    if dist is None:
        return local()
    comm = _object_group(dist, group)
    try:
        sel, exc = local(), None
    except Exception as err:  # every rank must reach the all-gather, whatever failed here
        sel, exc = None, err
    outcomes: list[Any] = [None] * dist.get_world_size(comm)
    dist.all_gather_object(outcomes, _outcome(sel, exc, on_disagreement), group=comm)
    me = dist.get_rank(comm)
    _check(outcomes, me, exc)
    assert sel is not None  # _check raised for every failed rank
    differ = [r for r, o in enumerate(outcomes) if o["digest"] != outcomes[0]["digest"]]
    if not differ:
        note = f"ranks agree: all {len(outcomes)} ranks of the process group chose {outcomes[0]['choice']}"
        return dataclasses.replace(sel, notes=sel.notes + (note,))
    _check_differing(outcomes, differ, on_disagreement)
    box = [sel if me == 0 else None]
    dist.broadcast_object_list(box, src=0 if comm is None else dist.get_global_rank(comm, 0), group=comm)
    return _adopt(box[0], sel, me, outcomes, differ)


def _object_group(dist: Any, group: Any) -> Any:
    """A group that carries Python objects on the CPU: ``group`` itself, or a gloo group over an NCCL world."""
    if group is not None and dist.get_rank(group) < 0:
        raise ValueError(
            f"this process (global rank {dist.get_rank()}) is not a member of the process group passed as "
            "group=; pass a group this rank belongs to, or distributed=False"
        )
    backend = str(dist.get_backend(group)).lower()
    if backend in _CPU_BACKENDS or "cpu:" in backend:
        return group
    if group is not None and group is not dist.group.WORLD:
        raise ValueError(
            f"the process group passed as group= uses {backend}, which carries Python objects only through a "
            "CUDA device, and hwtune never initialises CUDA; pass a gloo group over the same ranks "
            "(torch.distributed.new_group(ranks, backend='gloo')), or distributed=False and share the choice "
            "yourself"
        )
    if not dist.is_gloo_available():
        raise ValueError(
            f"the default process group uses {backend} and this torch has no gloo backend for hwtune's CPU "
            "agreement; pass group= a group that carries CPU tensors, or distributed=False"
        )
    world = dist.group.WORLD
    made = _GLOO.get("world")
    if made is None or made[0] is not world:  # once per world: new_group is collective over the world
        made = _GLOO["world"] = (world, dist.new_group(backend="gloo"))
    return made[1]


def _outcome(sel: Selection | None, exc: BaseException | None, mode: str) -> dict[str, Any]:
    """What this rank tells the others: plain data, a few hundred bytes."""
    if sel is None:
        return {"ok": False, "mode": mode, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "ok": True,
        "mode": mode,
        # the layout is an answer, not part of the question: with kv_layout=auto each rank's store decides it
        "question": {"kind": sel.kind, **{k: str(v) for k, v in sel.spec.items() if k != "kv_layout"}},
        "digest": digest(sel),
        "choice": describe(sel),
        "uses": sorted({sel.backend, *sel.per_phase.values()}),
        "valid": [r.backend for r in sel.ranked],
        "device": sel.device.describe(),
    }


def _choices(outcomes: list[dict[str, Any]]) -> dict[int, str]:
    return {r: (o["choice"] if o["ok"] else o["error"]) for r, o in enumerate(outcomes)}


def _warn_once(message: str) -> None:
    """Log ``message`` as a warning the first time this process sees it (warm calls repeat the agreement)."""
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning("hwtune: %s", message)


def _table(outcomes: list[dict[str, Any]]) -> str:
    return "\n".join(f"  rank {r}: {c}" for r, c in _choices(outcomes).items())


def _check(outcomes: list[dict[str, Any]], me: int, exc: BaseException | None) -> None:
    """Raise on every rank when any rank failed or the ranks asked different questions."""
    failed = [r for r, o in enumerate(outcomes) if not o["ok"]]
    if failed:
        if exc is not None:
            raise exc  # this rank's own error, as it would raise without a group
        raise RanksDisagreeError(
            f"backend selection failed on rank{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))} of "
            f"the process group (this is rank {me}), so every rank stops here rather than run without an agreed "
            f"backend:\n{_table(outcomes)}\nFix the failing rank's error (its own message says how); every rank "
            "must be able to serve the same backend.",
            _choices(outcomes),
        )
    asked = [(o["question"], o["mode"]) for o in outcomes]
    if any(a != asked[0] for a in asked):
        raise RanksDisagreeError(
            "the ranks of the process group asked different questions, so no single answer fits them all:\n"
            + "\n".join(f"  rank {r}: {_asked_differently(asked[0], a)}" for r, a in enumerate(asked) if r)
            + "\nCall with the same spec and on_disagreement on every rank, select per group of ranks that share "
            "a spec (group=), or pass distributed=False.",
            _choices(outcomes),
        )


def _asked_differently(first: tuple[dict[str, str], str], other: tuple[dict[str, str], str]) -> str:
    (q0, mode0), (q, mode) = first, other
    diff = [f"{k}={q.get(k)} (rank 0: {q0.get(k)})" for k in sorted(set(q0) | set(q)) if q0.get(k) != q.get(k)]
    if mode != mode0:
        diff.append(f"on_disagreement={mode!r} (rank 0: {mode0!r})")
    return ", ".join(diff) or "the same as rank 0"


def _where(rank: int, outcomes: list[dict[str, Any]]) -> str:
    missing = sorted(set(outcomes[0]["uses"]) - set(outcomes[rank]["valid"]))
    return f"rank {rank} on {outcomes[rank]['device']} cannot use {', '.join(missing)}"


def _check_differing(outcomes: list[dict[str, Any]], differ: list[int], on_disagreement: str) -> None:
    """Raise on every rank when rank 0's choice cannot run on some rank, or when asked to on any difference."""
    unusable = [r for r, o in enumerate(outcomes) if set(outcomes[0]["uses"]) - set(o["valid"])]
    if unusable:
        raise RanksDisagreeError(
            f"rank 0 chose {outcomes[0]['choice']}, which is not valid on rank"
            f"{'s' if len(unusable) > 1 else ''} {', '.join(map(str, unusable))} "
            f"({'; '.join(_where(r, outcomes) for r in unusable)}):\n{_table(outcomes)}\n"
            "Run `hwtune select --explain` on those hosts to see why, and request a backend valid on every rank "
            "(backend= or the HWTUNE_*_BACKEND variable), or make the ranks' software and devices alike.",
            _choices(outcomes),
        )
    if on_disagreement == "raise":
        raise RanksDisagreeError(
            f"the ranks of the process group chose differently (rank{'s' if len(differ) > 1 else ''} "
            f"{', '.join(map(str, differ))} differ from rank 0), and on_disagreement='raise':\n{_table(outcomes)}\n"
            "Give every rank the same store (--db / HWTUNE_DATABASE_URL), request one backend on every rank, or "
            "use on_disagreement='use_rank0' to make every rank use rank 0's choice.",
            _choices(outcomes),
        )


def _adopt(chosen: Selection, own: Selection, me: int, outcomes: list[dict[str, Any]], differ: list[int]) -> Selection:
    """Rank 0's Selection with notes on the disagreement; a rank whose own answer differed warns and says how."""
    others = ", ".join(f"rank {r} chose {outcomes[r]['choice']}" for r in differ)
    notes = [
        f"ranks disagreed ({others}); every rank of the process group uses rank 0's choice "
        f"{outcomes[0]['choice']} (on_disagreement='use_rank0')"
    ]
    if me == 0:
        _warn_once(notes[0])
    if me in differ:
        mine = f"this rank (rank {me}) would have chosen {describe(own)}; {_differences(own, chosen)}"
        _warn_once(f"{mine}; using rank 0's choice {outcomes[0]['choice']}")
        notes.append(mine)
    return dataclasses.replace(chosen, notes=chosen.notes + tuple(notes))


def _differences(own: Selection, chosen: Selection) -> str:
    """Which parts of the decision differ between this rank's own answer and rank 0's."""
    mine, theirs = decision(own), decision(chosen)
    parts = []
    labels = (
        ("backend", "backend"),
        ("tactics", "tactics"),
        ("per_phase", "per-phase backends"),
        ("kv_layout", "KV layout"),
    )
    for key, label in labels:
        if mine[key] != theirs[key]:
            parts.append(f"{label} {mine[key]} here, {theirs[key]} on rank 0")
    for key, label in (("dispatch", "dispatch table"), ("phase_dispatch", "routed phases' dispatch table")):
        if mine[key] != theirs[key]:
            parts.append(f"{label} of {len(mine[key])} cells here, {len(theirs[key])} on rank 0")
    return "differs in " + "; ".join(parts)
