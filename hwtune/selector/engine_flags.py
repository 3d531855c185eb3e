"""Engine adapters: turn a Selection into the flags an engine is started with.

The flags themselves live in each backend's catalogue record (``Backend.engines``); this module only looks
them up and turns a missing one into an error that says what to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hwtune.core import catalogue
from hwtune.core.errors import InvalidSpecError

if TYPE_CHECKING:
    from hwtune.selector.selection import Selection

#: Engine name -> how errors spell it.
ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}
_FLAG_WORDS = {
    ("vllm", "attention"): "attention backend",
    ("sglang", "attention"): "attention backend",
    ("vllm", "all2all"): "--all2all-backend value",
    ("sglang", "all2all"): "--moe-a2a-backend",
}


class NoEngineEquivalentError(InvalidSpecError):
    """The chosen backend has no flag in the asked engine; the message says what to use instead."""


def engine_args(selection: "Selection", engine: str) -> list[str]:
    """The flags that start ``engine`` with the selected backend (and tactic, where the engine names it). A selection
    made for an engine target is that engine's backend, spelled as it spells it; it answers for that engine only."""
    if selection.engine is not None:
        if selection.engine["engine"] == engine:
            return ["--attention-backend", selection.backend]
        raise NoEngineEquivalentError(
            f"This selection was made for {selection.engine_name}; {ENGINES[engine]} has other backends and rules. "
            f"Select again for it (--engine {engine}, or engine='{engine}')"
        )
    record = catalogue.get(selection.kind, selection.backend)
    flags = record.engines.get(engine)
    args = flags.for_tactic(selection.tactic) if flags is not None else ()
    if args:
        return list(args)
    missing = (
        flags.missing
        if flags is not None and flags.missing
        else (f"{ENGINES[engine]} has no {_FLAG_WORDS[(engine, selection.kind)]} equivalent to {selection.backend}")
    )
    way_out = f"; select for {ENGINES[engine]} (--engine {engine}) to get one of its own backends"
    raise NoEngineEquivalentError(missing.format(tactic=selection.tactic, backend=selection.backend) + way_out)


def vllm_args(selection: "Selection") -> list[str]:
    """vLLM flags: ``--attention-backend NAME`` (vLLM's names) or ``--all2all-backend name``."""
    return engine_args(selection, "vllm")


def sglang_args(selection: "Selection") -> list[str]:
    """SGLang flags for the chosen backend (and tactic where SGLang names kernels separately)."""
    return engine_args(selection, "sglang")
