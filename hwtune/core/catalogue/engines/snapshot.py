"""Loading the engine snapshots (``vllm.json``, ``sglang.json`` beside this module) and resolving their clauses.

A snapshot file holds every supported version of one engine. Each fact is a clause or a list of clauses; the
first clause whose ``versions`` include the asked version and whose ``when`` holds is the fact. A clause
without ``versions`` holds for every version in the file, so a fact that did not change between releases is
stated once.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping

from hwtune.core.catalogue.engines.conditions import EngineConfig, holds

#: Engines with a snapshot, in the order ``--engine`` lists them.
ENGINES: tuple[str, ...] = ("vllm", "sglang")


@dataclass(frozen=True)
class Clause:
    """One resolved fact: its value and the engine source (file and function) that states it."""

    value: Any
    source: str


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


class Snapshot:
    """One engine's dated snapshot: its versions, selector kind, priorities or decision list, and per-backend
    facts, each with its source."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.engine: str = data["engine"]
        self.display: str = data["display"]
        self.selector: str = data["selector"]
        self.newest: str = data["newest"]

    @property
    def versions(self) -> list[str]:
        """The versions this snapshot covers, newest first."""
        return sorted(self.data["versions"], key=_version_key, reverse=True)

    def describe(self, version: str) -> str:
        """The engine and version in words ("vLLM 0.33.0")."""
        return f"{self.display} {version}"

    def backend_names(self) -> list[str]:
        """Every backend the snapshot states facts for, in file order."""
        return list(self.data.get("backends", {}))

    def backend(self, name: str) -> Mapping[str, Any] | None:
        """The facts of backend ``name`` (the engine's spelling), or None when the snapshot does not list it."""
        return self.data.get("backends", {}).get(name)

    def resolve(
        self, fact: Any, version: str, cfg: EngineConfig | None, extra: Mapping[str, Any] | None = None
    ) -> Clause | None:
        """The first clause of ``fact`` that applies to ``version`` and whose condition holds for ``cfg`` (a clause
        with a condition never applies when ``cfg`` is None); None when none applies."""
        clauses = fact if isinstance(fact, list) else [fact]
        for clause in clauses:
            if "versions" in clause and version not in clause["versions"]:
                continue
            if clause.get("when") and (cfg is None or not holds(clause["when"], cfg, extra)):
                continue
            return Clause(clause.get("value"), clause.get("source", ""))
        return None

    def fact(self, backend: str, key: str, version: str, cfg: EngineConfig) -> Clause | None:
        """Backend ``backend``'s fact ``key`` for ``version`` and ``cfg`` (None when not stated)."""
        facts = self.backend(backend) or {}
        return self.resolve(facts[key], version, cfg) if key in facts else None

    def engine_fact(self, key: str, version: str, cfg: EngineConfig | None = None) -> Clause | None:
        """An engine-wide fact (``kv_cache_dtypes``, ``default_block_size``, ``block_size_rule``, ...)."""
        return self.resolve(self.data[key], version, cfg) if key in self.data else None

    def flag(self, key: str, version: str) -> Clause | None:
        """How this engine version is told ``key`` (``attention_backend``, ``block_size``, ``kv_layout_env``, ...;
        docs/engines.md "Flags"): a flag, an environment variable or a vocabulary; a clause whose value is None where
        the version has no such setting; None where the snapshot says nothing."""
        flags = self.data.get("flags", {})
        return self.resolve(flags[key], version, None) if key in flags else None

    def kv_cache_dtypes(self, version: str) -> list[str]:
        """The kv-cache dtype names this engine version accepts at all (its vocabulary)."""
        clause = self.engine_fact("kv_cache_dtypes", version)
        return list(clause.value) if clause else []


@functools.lru_cache(maxsize=None)
def snapshot(engine: str) -> Snapshot:
    """The snapshot of ``engine`` ("vllm" or "sglang"), read once per process."""
    if engine not in ENGINES:
        raise ValueError(f"no snapshot for engine {engine!r}; known: {', '.join(ENGINES)}")
    text = resources.files("hwtune.core.catalogue.engines").joinpath(f"{engine}.json").read_text(encoding="utf-8")
    return Snapshot(json.loads(text))


@functools.lru_cache(maxsize=None)
def known_kv_cache_dtypes() -> frozenset[str]:
    """Every kv-cache dtype name some supported engine version accepts (hwtune accepts these names in specs)."""
    names: set[str] = set()
    for engine in ENGINES:
        snap = snapshot(engine)
        for version in snap.versions:
            names.update(snap.kv_cache_dtypes(version))
    return frozenset(names)
