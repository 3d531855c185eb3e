"""Engine adapters: turn a Selection into what an engine is started with, for one engine version.

``launch(selection, engine, all2all=...)`` gives an ``EngineLaunch``: the command-line flags (attention backend, per
phase where the engine version can route phases to different backends, KV block size, KV-cache dtype, MoE all2all
backend), the environment variables (vLLM's KV layout has no flag) and notes on anything it could not say as a flag.
Flag names and value vocabularies come from the engine snapshot's ``flags`` (``hwtune/core/catalogue/engines``, with
the engine source of each); which engine backend a hwtune record is comes from the record's ``engines`` entry.

Honest mapping: an engine flag is only emitted for an engine backend that was itself ranked or is built on the
measured kernel. hwtune's own kernels (HWTUNE_TRITON_ATTN, HWTUNE_TURBOQUANT) have no engine flag: when one of them
is chosen, the launch names the best ranked engine-native backend instead and says so.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from hwtune.core import catalogue
from hwtune.core.catalogue.engines import EngineTarget, engine_page_size, preferred_block_size, resolve_target
from hwtune.core.errors import InvalidSpecError

if TYPE_CHECKING:
    from hwtune.selector.selection import Selection

#: Engine name -> how errors spell it.
ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}
_FLAG_WORDS = {"attention": "attention backend", "all2all": "MoE all2all backend"}


class NoEngineEquivalentError(InvalidSpecError):
    """The selection has no flag in the asked engine; the message says what to use instead."""


@dataclass(frozen=True)
class EngineLaunch:
    """What starts one engine version with a selection: flags, environment variables, and notes."""

    engine: str
    version: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def env_var(self) -> str:
        """The variable ``to_env`` puts the flags in, for launch scripts (``vllm serve $HWTUNE_VLLM_ARGS``)."""
        return f"HWTUNE_{self.engine.upper()}_ARGS"

    def to_env(self) -> dict[str, str]:
        """The engine's own environment variables plus the flags, shell-quoted, in ``env_var``."""
        return {**self.env, self.env_var: shlex.join(self.args)}

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "version": self.version,
            "args": list(self.args),
            "env": dict(self.env),
            "notes": list(self.notes),
        }


@dataclass
class _Parts:
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def launch(selection: "Selection", engine: str | None = None, all2all: "Selection | None" = None) -> EngineLaunch:
    """How to start ``engine`` (default: the selection's engine target) with ``selection`` and, for a MoE model, the
    ``all2all`` selection too (module docstring)."""
    target = _target(selection, engine)
    parts = _Parts()
    for sel in (selection, all2all):
        if sel is not None:
            (_attention if sel.kind == "attention" else _all2all)(sel, target, parts)
    return EngineLaunch(target.engine, target.version, tuple(parts.args), parts.env, tuple(parts.notes))


def _target(selection: "Selection", engine: str | None) -> EngineTarget:
    if selection.engine is not None:
        made_for = selection.engine["engine"]
        if engine is not None and engine != made_for:
            raise NoEngineEquivalentError(
                f"This selection was made for {selection.engine_name}; {ENGINES[engine]} has other backends and rules."
                f" Select again for it (--engine {engine}, or engine='{engine}')"
            )
        return resolve_target(made_for, selection.engine["version"])  # type: ignore[return-value]
    if engine is None:
        raise InvalidSpecError(
            f"say which engine to configure ({', '.join(ENGINES)}): the selection was made with hwtune's own "
            "catalogue (--engine none)"
        )
    return resolve_target(engine)  # type: ignore[return-value]


def _flag(target: EngineTarget, key: str) -> str | None:
    clause = target.snapshot.flag(key, target.version)
    return None if clause is None else clause.value


def _native_name(kind: str, backend: str, tactic: str, engine: str) -> str | None:
    """The engine's name for a hwtune record at a tactic (from the record's flags), or None."""
    flags = catalogue.get(kind, backend).engines.get(engine)
    args = flags.for_tactic(tactic) if flags is not None else ()
    return args[1] if len(args) > 1 else None


def _engine_backends(sel: "Selection", target: EngineTarget, parts: _Parts) -> dict[str, str]:
    """The engine backend per phase ("decode", "prefill") and for one backend alone ("single")."""
    if sel.requested:  # asked for by name: that backend for every phase
        native = (
            sel.backend if sel.engine is not None else _native_name("attention", sel.backend, sel.tactic, target.engine)
        )
        if native is None:
            raise NoEngineEquivalentError(_missing("attention", sel, target))
        return {"single": native, "decode": native, "prefill": native}
    if sel.engine is not None:
        single = sel.backend
        return {"single": single, **{p: sel.per_phase.get(p, single) for p in ("decode", "prefill")}}
    native = []
    for r in [*[r for r in sel.ranked if r.backend == sel.backend], *sel.ranked]:
        name = _native_name("attention", r.backend, r.tactics.get("decode", sel.tactic), target.engine)
        if name is not None:
            native.append((r, name))
    if not native:
        raise NoEngineEquivalentError(_missing("attention", sel, target))
    best, single = native[0]
    if best.backend != sel.backend:
        parts.notes.append(_substitute_note(sel, target, best.backend, single, best.source))
        return {"single": single, "decode": single, "prefill": single}
    out = {"single": single}
    for phase in ("decode", "prefill"):
        record = sel.per_phase.get(phase, sel.backend)
        rank = next((r for r in sel.ranked if r.backend == record), best)
        out[phase] = _native_name("attention", record, rank.tactics.get(phase, ""), target.engine) or single
    return out


def _missing(kind: str, sel: "Selection", target: EngineTarget) -> str:
    flags = catalogue.get(kind, sel.backend).engines.get(target.engine)
    why = flags.missing if flags is not None and flags.missing else ""
    why = why.format(tactic=sel.tactic, backend=sel.backend) or (
        f"{ENGINES[target.engine]} has no {_FLAG_WORDS[kind]} equivalent to {sel.backend}"
    )
    return f"{why}, and no other valid backend has one; select for {target.describe()} (--engine {target.engine})"


def _substitute_note(sel: "Selection", target: EngineTarget, record: str, name: str, source: str) -> str:
    own = catalogue.get(sel.kind, sel.backend).engines.get(target.engine)
    why = own.missing.format(tactic=sel.tactic, backend=sel.backend) if own is not None and own.missing else ""
    return (
        f"{sel.backend} has no {target.describe()} flag ({why or 'no equivalent'}); an engine backend of a similar "
        f"name is other code and was not measured. Flags for the best {source} engine-native choice: {name} "
        f"(hwtune's {record})"
    )


def _attention(sel: "Selection", target: EngineTarget, parts: _Parts) -> None:
    names = _engine_backends(sel, target, parts)
    _backend_flags(names, target, parts)
    _block_flags(sel, target, sorted({names["decode"], names["prefill"]}), parts)
    kv_dtype = sel.spec.get("kv_cache_dtype", "auto")
    if kv_dtype != "auto":
        vocabulary = target.snapshot.kv_cache_dtypes(target.version)
        if kv_dtype not in vocabulary:
            raise NoEngineEquivalentError(
                f"{target.describe()} has no kv-cache dtype {kv_dtype} (its names: {', '.join(vocabulary)})"
            )
        parts.args += [_flag(target, "kv_cache_dtype"), kv_dtype]  # type: ignore[list-item]
    _layout(sel, target, parts)


def _backend_flags(names: dict[str, str], target: EngineTarget, parts: _Parts) -> None:
    """One backend, or one per phase where the engine version has the flags for it."""
    main = _flag(target, "attention_backend")
    decode, prefill = names["decode"], names["prefill"]
    if decode == prefill:  # one winner for both phases (or none per phase): the selection's choice
        parts.args += [main, names["single"]]  # type: ignore[list-item]
        return
    decode_flag, prefill_flag = _flag(target, "decode_attention_backend"), _flag(target, "prefill_attention_backend")
    if decode_flag and prefill_flag:
        parts.args += [prefill_flag, prefill, decode_flag, decode]
    elif decode_flag:
        parts.args += [main, prefill, decode_flag, decode]  # type: ignore[list-item]
    else:
        clause = target.snapshot.flag("decode_attention_backend", target.version)
        parts.args += [main, names["single"]]  # type: ignore[list-item]
        parts.notes.append(
            f"{target.describe()} cannot route prefill and decode to different backends "
            f"({clause.source if clause else 'no per-phase flag'}): {names['single']} is the best single backend over "
            f"the mix; alone, decode would take {decode} and prefill {prefill}"
        )


def _block_flags(sel: "Selection", target: EngineTarget, backends: list[str], parts: _Parts) -> None:
    """The KV block size the engine will run at: the one selected for; with none, the size a validating engine
    (vLLM) runs the backend at; a deciding engine (SGLang) runs some backends at a page size of its own whatever is
    given (flashmla at 64), and the flag says that size (a note when it is not the one selected for)."""
    size = sel.spec.get("block_size")
    deciding = target.snapshot.selector == "decision"
    if sel.engine is not None and (deciding or size is None):
        sizes = {_engine_size(sel, target, b, deciding) for b in backends}
        if len(sizes) > 1:
            parts.notes.append(f"{' and '.join(backends)} run at different block sizes ({sorted(sizes)}): none given")
            return
        runs = sizes.pop()
        if deciding and size is not None and runs != size:
            parts.notes.append(f"{target.describe()} runs {backends[0]} at page size {runs}, not {size}")
        elif deciding and size is None and runs == _engine_default(target):
            runs = None  # nothing forces a page size: SGLang's own default applies
        size = runs
    if size is not None:
        parts.args += [_flag(target, "block_size"), str(size)]  # type: ignore[list-item]


def _engine_size(sel: "Selection", target: EngineTarget, backend: str, deciding: bool) -> int:
    from hwtune.core.engine_validation import config_for
    from hwtune.core.types import AttentionSpec

    cfg = config_for(target, AttentionSpec.from_dict(sel.spec), sel.device, assume_installed=True)
    if deciding:
        return engine_page_size(target.snapshot, target.version, backend, cfg)
    return preferred_block_size(target.snapshot, target.version, backend, cfg)


def _engine_default(target: EngineTarget) -> int:
    return int(target.snapshot.engine_fact("default_block_size", target.version).value)  # type: ignore[union-attr]


def _layout(sel: "Selection", target: EngineTarget, parts: _Parts) -> None:
    """The KV layout selected for (requested or measured): an environment variable where the engine takes one."""
    layout = sel.kv_layout
    if layout not in ("NHD", "HND") or sel.spec.get("use_mla"):
        return
    variable = _flag(target, "kv_layout_env")
    runs = _flag(target, "kv_layouts") or []
    if variable and layout in runs:
        parts.env[variable] = layout
    elif layout not in runs:
        parts.notes.append(
            f"{target.describe()} has no KV layout setting and runs {'/'.join(runs) or 'its own'}; this selection is "
            f"for {layout}: select with --kv-layout {runs[0] if runs else 'auto'} for the layout it runs"
        )


def _all2all(sel: "Selection", target: EngineTarget, parts: _Parts) -> None:
    """The MoE all2all flag: the chosen backend's, else the best ranked one the engine has (said in a note)."""
    order = [sel.backend, *[r.backend for r in sel.ranked if r.backend != sel.backend]]
    for name in order:
        flags = catalogue.get("all2all", name).engines.get(target.engine)
        args = flags.for_tactic(sel.tactic) if flags is not None else ()
        if args:
            break
    else:
        raise NoEngineEquivalentError(_missing("all2all", sel, target))
    if name != sel.backend:
        parts.notes.append(_substitute_note(sel, target, name, args[1], "ranked"))
    parts.args += list(args)
