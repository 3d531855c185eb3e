"""Plan files: a TOML description of what to measure (``hwtune tune --plan FILE``), checked key by key.

A file names its model (or gives an [attention] spec), grids per phase (decode batch x context, prefill chunk x
prefix, mixed batches) and an [all2all] table; every key is checked, so a misspelt or wrongly typed one is a clear
error (exit 2), never silently ignored. docs/tuning.md "Plan files" shows one.
"""

from __future__ import annotations

import tomllib
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from hwtune.core.devices import DeviceProfile
from hwtune.core.errors import InvalidSpecError
from hwtune.core.model_config import ModelInfo, all2all_spec, attention_spec, load_model_config
from hwtune.core.types import All2AllSpec, All2AllWorkload, AttentionSpec, AttentionWorkload
from hwtune.tuner.plan import Plan, PlanItem, kv_fits
from hwtune.tuner.plan_model import all2all_dtypes, layer_kinds_note, mixed_layer_windows, planned_layouts


def _ints(value: Any, what: str, minimum: int = 1) -> tuple[int, ...]:
    vals = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in vals):
        raise InvalidSpecError(f"plan file: {what} must be integers >= {minimum}, got {value!r}")
    return tuple(vals)


_PLAN_KEYS = {"name", "time_cap_s", "model", "attention", "all2all"}
#: Keys each table of a plan file may hold (besides [attention]'s AttentionSpec fields and [all2all]'s All2AllSpec
#: fields), so that a misspelt key is an error rather than silently ignored.
_TABLE_KEYS = {
    "model": {"config", "tp"},
    "decode": {"batch", "context", "ragged", "seed", "level", "backends"},
    "prefill": {"chunk", "prefix", "batch", "level", "backends"},
    "mixed": {"batch", "context", "chunk", "num_prefill", "level", "backends"},
}


def _check_keys(table: Any, known: Iterable[str], where: str) -> dict[str, Any]:
    """``table`` as a dict, after checking it is a table whose keys are all ``known``."""
    if not isinstance(table, Mapping):
        raise InvalidSpecError(f"{where} must be a table (a [section] or {{ key = value }}), got {table!r}")
    unknown = set(table) - set(known)
    if unknown:
        raise InvalidSpecError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}"
        )
    return dict(table)


def _one_int(value: Any, what: str, minimum: int = 1) -> int:
    """A single whole number of at least ``minimum``, else an error naming the key."""
    if isinstance(value, list):
        raise InvalidSpecError(f"plan file: {what} takes one integer >= {minimum}, got {value!r}")
    return _ints(value, what, minimum)[0]


def plan_from_toml(path: str | Path, *, device: DeviceProfile | None = None) -> Plan:
    """Read a TOML plan (format in docs/tuning.md; example in examples/plan.toml). A missing file, bad TOML, an
    unknown key or a value of the wrong type is an InvalidSpecError naming the file and the key."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except (FileNotFoundError, IsADirectoryError):
        raise InvalidSpecError(f"no plan file at {p}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidSpecError(f"{p} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise InvalidSpecError(f"{p} is not a text file (a TOML plan is UTF-8 text)") from None
    try:
        return _plan_from_doc(doc, p, device)
    except InvalidSpecError as exc:
        text = str(exc)
        raise InvalidSpecError(text if str(p) in text else f"plan file {p}: {text}") from None
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a value of the wrong type or shape
        raise InvalidSpecError(
            f"plan file {p}: {type(exc).__name__}: {exc} (docs/tuning.md shows each key's type)"
        ) from None


def _plan_from_doc(doc: dict[str, Any], p: Path, device: DeviceProfile | None) -> Plan:
    """The plan a parsed TOML document describes (``plan_from_toml``)."""
    _check_keys(doc, _PLAN_KEYS, "the top level")
    model = _check_keys(doc.get("model", {}), _TABLE_KEYS["model"], "[model]")
    info = load_model_config(p.parent / str(model["config"])) if "config" in model else None
    tp = _one_int(model.get("tp", 1), "[model] tp")
    notes: list[str] = []
    items: list[PlanItem] = []
    windows: tuple[int | None, ...] = ()
    tables = doc.get("attention", [])
    for table in tables if isinstance(tables, list) else [tables]:
        planned = _attention_table(_check_keys(table, _attention_keys(), "[attention]"), info, tp, p)
        kinds, planned = _with_full_attention_layers(planned, info, notes)
        windows = windows or kinds
        items += planned
    fitting = [i for i in items if kv_fits(i.workload, device)]  # type: ignore[arg-type]
    skipped = [
        f"skipped {i.workload.phase} batch {i.workload.batch} x {i.workload.context_len} tokens: its "  # type: ignore[union-attr]
        "KV cache does not fit in memory"
        for i in items
        if i not in fitting
    ]
    notes += list(dict.fromkeys(skipped))  # a mixed model's two kinds of layers skip the same shapes
    items = fitting
    if "all2all" in doc:
        items += _all2all_table(_check_keys(doc["all2all"], _all2all_keys(), "[all2all]"), info)
    if not items:
        raise InvalidSpecError(f"plan file {p} plans no workloads: give [attention] grids or [all2all]")
    time_cap = doc.get("time_cap_s", 2.0)
    if isinstance(time_cap, bool) or not isinstance(time_cap, (int, float)) or time_cap <= 0:
        raise InvalidSpecError(f"time_cap_s must be a positive number of seconds, got {time_cap!r}")
    return Plan(
        name=str(doc.get("name", p.stem)), items=items, notes=notes, time_cap_s=float(time_cap), layer_windows=windows
    )


def _with_full_attention_layers(
    items: list[PlanItem], info: ModelInfo | None, notes: list[str]
) -> tuple[tuple[int | None, ...], list[PlanItem]]:
    """For a model that mixes windowed and full-attention layers, ``items`` (its windowed spec) and the same grid for
    its full-attention layers, as a plan from ``--model`` measures them, with the plan's ``layer_windows`` and note;
    ``items`` alone otherwise."""
    spec = items[0].workload.spec if items and isinstance(items[0].workload, AttentionWorkload) else None
    kinds = mixed_layer_windows(info, spec) if spec is not None else ()
    if not kinds or info is None or spec is None:
        return (), items
    full = []
    for i in items:
        w = i.workload
        assert isinstance(w, AttentionWorkload)
        full.append(replace(i, workload=replace(w, spec=replace(w.spec, sliding_window=None))))
    note = layer_kinds_note(info, spec)
    notes += [] if note in notes else [note]
    return kinds, items + full


def _attention_keys() -> set[str]:
    return {f.name for f in fields(AttentionSpec)} | {"backends", "decode", "prefill", "mixed"}


def _all2all_keys() -> set[str]:
    return {f.name for f in fields(All2AllSpec)} | {"backends", "tokens_per_rank"}


def _all2all_table(a: dict[str, Any], info: ModelInfo | None) -> list[PlanItem]:
    """The items of the [all2all] table: one per activation dtype and tokens-per-rank point."""
    backends = tuple(a.pop("backends", ())) or None
    tokens = _ints(a.pop("tokens_per_rank", [1, 64, 1024, 8192]), "all2all.tokens_per_rank")
    quants = a.pop("quant_dtype", None) or list(all2all_dtypes(info if info and info.is_moe else None, None)[0])
    items: list[PlanItem] = []
    for q in quants if isinstance(quants, list) else [quants]:
        spec2 = (
            all2all_spec(info, **{**a, "quant_dtype": q})
            if info is not None and info.is_moe
            else All2AllSpec(**{**a, "quant_dtype": q})
        )
        items += [PlanItem(All2AllWorkload(spec2, t), 0, backends) for t in tokens]
    return items


def _ragged(batch: int, context: int, seed: int) -> tuple[int, ...]:
    """Mixed context lengths: uniform in [context/4, context], deterministic per (batch, context, seed)."""
    import random

    rng = random.Random(hash((batch, context, seed)) & 0xFFFFFFFF)
    return tuple(rng.randint(max(1, context // 4), context) for _ in range(batch))


def _grids(a: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Pop the [[attention.decode|prefill|mixed]] grids out of an [[attention]] table, each checked for unknown keys."""
    grids: dict[str, list[dict[str, Any]]] = {}
    for phase in ("decode", "prefill", "mixed"):
        entries = a.pop(phase, [])
        entries = entries if isinstance(entries, list) else [entries]
        grids[phase] = [_check_keys(d, _TABLE_KEYS[phase], f"[[attention.{phase}]]") for d in entries]
    return grids


def _attention_table(a: dict[str, Any], info: ModelInfo | None, tp: int, p: Path) -> list[PlanItem]:
    """One [[attention]] table: a spec (model + overrides, or explicit heads) and its grids."""
    backends = tuple(a.pop("backends", ())) or None
    grids = _grids(a)
    try:
        spec = attention_spec(info, tp, **a) if info is not None else AttentionSpec(**a)
    except TypeError as exc:
        raise InvalidSpecError(f"plan file {p}: [attention] {exc}") from None
    items: list[PlanItem] = []

    def own(d: Mapping[str, Any]) -> tuple[str, ...] | None:
        return tuple(d["backends"]) if "backends" in d else backends

    for d in grids.get("decode", []):
        for b in _ints(d.get("batch", 1), "decode.batch"):
            for c in _ints(d.get("context", 4096), "decode.context"):
                lens = _ragged(b, c, _one_int(d.get("seed", 0), "decode.seed", 0)) if d.get("ragged") else None
                items.append(
                    PlanItem(
                        AttentionWorkload(spec, "decode", b, c, query_len=spec.query_len_decode, context_lens=lens),
                        _one_int(d.get("level", 0), "level", 0),
                        own(d),
                    )
                )
    for d in grids.get("prefill", []):
        for chunk in _ints(d.get("chunk", 2048), "prefill.chunk"):
            for prefix in _ints(d.get("prefix", 0), "prefill.prefix", minimum=0):
                items.append(
                    PlanItem(
                        AttentionWorkload(
                            spec,
                            "prefill",
                            _one_int(d.get("batch", 1), "prefill.batch"),
                            chunk + prefix,
                            query_len=chunk,
                        ),
                        _one_int(d.get("level", 0), "level", 0),
                        own(d),
                    )
                )
    for d in grids.get("mixed", []):
        items.append(
            PlanItem(
                AttentionWorkload(
                    spec,
                    "mixed",
                    _one_int(d.get("batch"), "mixed.batch"),
                    _one_int(d.get("context"), "mixed.context"),
                    query_len=_one_int(d.get("chunk", 512), "mixed.chunk"),
                    num_prefill=_one_int(d.get("num_prefill", 1), "mixed.num_prefill"),
                ),
                _one_int(d.get("level", 0), "level", 0),
                own(d),
            )
        )
    layouts = planned_layouts(spec)  # an auto spec: every declared layout, as in a model's plan
    return [
        replace(i, workload=replace(i.workload, spec=replace(spec, kv_layout=lay))) for lay in layouts for i in items
    ]
