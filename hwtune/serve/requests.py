"""Request bodies of the selection service, checked into the library's own types.

A select request is a JSON object holding the library call's arguments: ``spec`` (the fields of
``AttentionSpec`` or ``All2AllSpec``) and the keyword arguments of ``select_attention`` / ``select_all2all``
(``device``, ``backend``, ``assume_installed``, ``max_num_seqs``, ``max_model_len``, ``profile``, and whatever
the library takes next: they are read from its signature), less those the service sets itself (``db``,
``distributed``, ``group``, ``on_disagreement``), plus ``explain``. Each value's JSON type is checked here
against the annotations (a string where the spec needs an integer is refused, never coerced); the values
themselves are checked by the library: ``AttentionSpec`` / ``All2AllSpec`` build the spec here, the selection
call checks the rest (``hwtune.serve.service``), so the service refuses what the library refuses, in the
library's words after the field's name ("spec.dtype: unknown dtype 'fp9'; known: ..."). Every error is a
``BadRequest`` naming the field (``field``: ``spec.num_heads``, ``backend``, ...).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Union

from hwtune.core.errors import InvalidSpecError
from hwtune.core.types import All2AllSpec, AttentionSpec, Spec
from hwtune.selector.mix import PROFILES

SPEC_TYPES: dict[str, type] = {"attention": AttentionSpec, "all2all": All2AllSpec}
#: What a value whose annotation this module cannot read may be.
SCALARS = frozenset({"null", "boolean", "integer", "number", "string"})
_KIND_WORDS = {
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "string": "a string",
    "null": "null",
    "object": "a JSON object",
    "array": "an array",
}


class BadRequest(InvalidSpecError):
    """A request the service refuses (HTTP 4xx): the message says what is wrong, ``field`` names where."""

    def __init__(self, message: str, field: str, status: int = 400) -> None:
        self.field = field
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class SelectRequest:
    """One select call, checked: the spec already built and the library call's keyword arguments as given
    (hashable, so the whole request is the answer cache's key)."""

    kind: str
    spec: Spec
    options: tuple[tuple[str, Any], ...] = ()
    explain: bool = False

    @property
    def kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of ``select_attention`` / ``select_all2all``."""
        return dict(self.options)


#: Arguments of the library call the service sets itself: the store is the service's, and a server is no rank.
SERVICE_SET = frozenset({"spec", "db", "distributed", "group", "on_disagreement"})
#: JSON kinds of the options whose annotations say less than the wire needs (a device is named, never sent).
_FIXED: dict[str, set[str]] = {"device": {"string"}, "backend": {"string", "null"}, "explain": {"boolean"}}


def json_kind(value: Any) -> str:
    """The JSON kind of a parsed value: null, boolean, integer, number, string, array or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _kinds(hint: Any) -> set[str] | None:
    """The JSON kinds a dataclass annotation accepts; None for an annotation this module does not know (the
    constructor then checks the value alone)."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        parts = [_kinds(arg) for arg in typing.get_args(hint)]
        return None if any(p is None for p in parts) else set().union(*parts)  # type: ignore[arg-type]
    if origin is Literal:
        return {json_kind(v) for v in typing.get_args(hint)}
    simple = {int: {"integer"}, float: {"number", "integer"}, bool: {"boolean"}, str: {"string"}}
    return {"null"} if hint is type(None) else simple.get(hint)


def _check_kind(field: str, value: Any, kinds: set[str] | frozenset[str] | None) -> None:
    if kinds is None or json_kind(value) in kinds:
        return
    words = " or ".join(_KIND_WORDS[k] for k in sorted(kinds, key=list(_KIND_WORDS).index) if k != "null")
    if "null" in kinds:
        words += " (or null)"
    raise BadRequest(f"{field} must be {words}, got {value!r} ({_KIND_WORDS[json_kind(value)]})", field)


def _field_named(message: str, names: list[str]) -> str | None:
    """The spec field a library message is about: the first (longest at a tie) field name in its words."""
    words = re.sub(r"[^a-z0-9_]+", "_", message.lower())
    found = [(words.find(n), -len(n), n) for n in names if re.search(rf"(^|_){n}(_|$)", words)]
    return min(found)[2] if found else None


@functools.cache
def _schema(cls: type) -> tuple[list[str], list[str], dict[str, set[str] | None]]:
    """(field names, required names, JSON kinds per field) of a spec dataclass; computed once (resolving the
    annotations costs more than answering a cached request)."""
    fields = dataclasses.fields(cls)
    hints = typing.get_type_hints(cls)
    required = [f.name for f in fields if f.default is dataclasses.MISSING]
    return [f.name for f in fields], required, {f.name: _kinds(hints[f.name]) for f in fields}


def build_spec(kind: str, data: Mapping[str, Any]) -> Spec:
    """``data`` (the request's ``spec`` object) as the library's spec of ``kind``, or ``BadRequest`` naming the
    field: a missing or unknown field, a value of the wrong JSON type, or what the spec's own checks refuse."""
    cls = SPEC_TYPES[kind]
    names, required, kinds = _schema(cls)
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise BadRequest(
            f"unknown {cls.__name__} field(s): {', '.join(unknown)}; known: {', '.join(names)}", f"spec.{unknown[0]}"
        )
    missing = [n for n in required if n not in data]
    if missing:
        raise BadRequest(
            f"spec.{missing[0]} is required: an {cls.__name__} needs {', '.join(required)}", f"spec.{missing[0]}"
        )
    for name, value in data.items():
        _check_kind(f"spec.{name}", value, kinds[name] or SCALARS)  # a spec is hashed: scalars only
    try:
        return cls.from_dict(data)
    except InvalidSpecError as exc:
        named = _field_named(str(exc), names)
        field = f"spec.{named}" if named else "spec"
        raise BadRequest(f"{field}: {exc}", field) from None


@functools.cache
def select_options(kind: str) -> dict[str, set[str] | None]:
    """The options a select body of ``kind`` takes, with their JSON kinds: the keyword arguments of
    ``select_attention`` / ``select_all2all`` (read from their signatures, so the service takes what the library
    takes) less those the service sets itself, plus ``explain``."""
    from hwtune.selector import api

    call = api.select_attention if kind == "attention" else api.select_all2all
    try:
        hints = typing.get_type_hints(call)
    except (NameError, TypeError):  # an annotation this module cannot resolve: the library checks those values
        hints = {}
    names = [n for n in inspect.signature(call).parameters if n not in SERVICE_SET]
    return {**{n: _kinds(hints.get(n, Any)) for n in names}, **_FIXED}


def _options(kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The request's options (all but spec), type-checked; the library fills in what is not given."""
    allowed = select_options(kind)
    unknown = sorted(set(body) - set(allowed) - {"spec"})
    if unknown:
        raise BadRequest(
            f"unknown field(s) {', '.join(unknown)}; POST /v1/select/{kind} takes: spec, {', '.join(allowed)}",
            unknown[0],
        )
    opts = {k: v for k, v in body.items() if k != "spec"}
    for name, value in opts.items():
        _check_kind(name, value, allowed[name] or SCALARS)  # the request is hashed: scalars only
    for name in ("max_num_seqs", "max_model_len"):
        if name in opts and opts[name] <= 0:
            raise BadRequest(f"{name} must be a positive integer, got {opts[name]}", name)
    if "profile" in opts and opts["profile"] not in PROFILES:
        raise BadRequest(
            f"unknown workload profile {opts['profile']!r}; known: {', '.join(PROFILES)} (the service reads no "
            "weights files: run `hwtune select --profile FILE` where the file is)",
            "profile",
        )
    opts["device"] = opts.get("device", "auto").strip().lower() or "auto"
    if (opts.get("backend") or "auto").strip().lower() == "auto":
        opts.pop("backend", None)  # as the library reads "auto": no request (the library looks names up)
    return opts


def parse_select(kind: str, body: Any) -> SelectRequest:
    """A select request of ``kind`` ("attention" or "all2all") from a parsed JSON body, or ``BadRequest``."""
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {_KIND_WORDS[json_kind(body)]}", "body")
    if "spec" not in body:
        raise BadRequest(f"spec is required: the {SPEC_TYPES[kind].__name__} fields, as a JSON object", "spec")
    opts = _options(kind, body)
    _check_kind("spec", body["spec"], {"object"})
    spec = build_spec(kind, body["spec"])
    explain = opts.pop("explain", False)
    return SelectRequest(kind=kind, spec=spec, options=tuple(sorted(opts.items())), explain=explain)


#: Most runs one listing returns.
MAX_RUNS = 1000


def parse_runs_query(params: Mapping[str, str]) -> tuple[int, str | None]:
    """``limit`` (1 to 1000, default 50) and ``state`` (running, done, failed, interrupted) of ``GET /v1/runs``,
    or ``BadRequest`` naming the parameter."""
    from hwtune.db.models import RUN_STATES

    unknown = sorted(set(params) - {"limit", "state"})
    if unknown:
        raise BadRequest(
            f"unknown query parameter(s) {', '.join(unknown)}; GET /v1/runs takes limit, state", unknown[0]
        )
    text = params.get("limit", "50")
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_RUNS:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_RUNS}, got {text!r}", "limit")
    state = params.get("state")
    if state is not None and state not in RUN_STATES:
        raise BadRequest(f"unknown run state {state!r}; known: {', '.join(RUN_STATES)}", "state")
    return limit, state
