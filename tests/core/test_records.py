"""Every catalogue record is complete and consistent: it is the one place that names a backend, so the
tables derived from it (priorities, probes, engine flags, quick plan, warm-up) are only as good as it is."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from hwtune.core import catalogue
from hwtune.core.catalogue.base import FAMILIES, Feature
from hwtune.core.catalogue.priorities import backend_order

ALL = [b for kind in ("attention", "all2all") for b in catalogue.backends(kind)]
ENGINES = ("vllm", "sglang")


def test_names_are_unique_across_kinds() -> None:
    lowered = [b.name.lower() for b in ALL]
    assert len(lowered) == len(set(lowered))
    for b in ALL:
        assert catalogue.find(b.name) is b and catalogue.find(b.name.lower()) is b
    assert catalogue.find("NO_SUCH_BACKEND") is None


@pytest.mark.parametrize("backend", ALL, ids=lambda b: b.name)
def test_record_declares_every_engine(backend: catalogue.Backend) -> None:
    tactics = {t.name for t in backend.tactics}
    assert set(backend.engines) == set(ENGINES), f"{backend.name}: declare {ENGINES} (empty args = no flag)"
    for engine, flags in backend.engines.items():
        assert set(flags.by_tactic) <= tactics, f"{backend.name}/{engine}: unknown tactic in by_tactic"
        if not flags.args and not flags.by_tactic:
            continue  # no flag in that engine: the adapter raises, with ``missing`` or a default message
        for args in (flags.args, *flags.by_tactic.values()):
            assert not args or (args[0].startswith("--") and len(args) >= 2), (backend.name, engine, args)


@pytest.mark.parametrize("backend", ALL, ids=lambda b: b.name)
def test_record_places_and_tactic_orders(backend: catalogue.Backend) -> None:
    assert set(backend.priority) <= set(FAMILIES)
    runs_on_cuda = "cuda" in (backend.rules.device_types or ())
    runs_on_cpu = "cpu" in (backend.rules.device_types or ())
    cuda_families = {f for f in FAMILIES if f != "cpu"}
    assert (cuda_families <= set(backend.priority)) == runs_on_cuda, backend.name
    assert ("cpu" in backend.priority) <= runs_on_cpu, f"{backend.name} has a CPU place but does not run on CPU"
    tactics = {t.name: t for t in backend.tactics}
    for family, phases in backend.tactic_order.items():
        assert family in FAMILIES
        for phase, names in phases.items():
            for name in names:
                assert name in tactics and phase in tactics[name].phases, (backend.name, family, phase, name)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind,mla", [("attention", False), ("attention", True), ("all2all", False)])
def test_static_places_form_one_order(kind: str, mla: bool, family: str) -> None:
    pool = [b for b in catalogue.backends(kind) if kind != "attention" or b.has(Feature.MLA) == mla]
    places = sorted(b.priority[family] for b in pool if family in b.priority)
    assert places == list(range(len(places))), f"{kind} mla={mla} {family}: places must be 0..n-1, once each"
    assert len(backend_order(kind, mla, family)) == len(places)


def _defines(ref: str) -> bool:
    module, _, cls = ref.partition(":")
    spec = importlib.util.find_spec(module)  # finds the file; imports only the (light) parent packages
    assert spec is not None and spec.origin, module
    tree = ast.parse(Path(spec.origin).read_text())
    return any(isinstance(n, ast.ClassDef) and n.name == cls for n in tree.body)


@pytest.mark.parametrize("backend", [b for b in ALL if b.probe], ids=lambda b: b.name)
def test_probe_names_a_class_that_exists(backend: catalogue.Backend) -> None:
    assert backend.probe is not None
    assert _defines(backend.probe.ref), f"{backend.name}: {backend.probe.ref} is not defined"


def _records_as(ref: str) -> str | None:
    """The ``backend = "..."`` a probe class records its measurements under (None when it states none)."""
    module, _, cls = ref.partition(":")
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    for node in ast.parse(Path(spec.origin).read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.Assign) and [getattr(t, "id", "") for t in item.targets] == ["backend"]:
                    return ast.literal_eval(item.value)
    return None


@pytest.mark.parametrize("backend", [b for b in ALL if b.probe and b.kind == "attention"], ids=lambda b: b.name)
def test_probes_record_under_their_records_name(backend: catalogue.Backend) -> None:
    """A measurement is stored under the name of what was measured: hwtune's own kernels as HWTUNE_*, never as the
    engine backends of the same kind (vLLM's TRITON_ATTN is another kernel)."""
    assert backend.probe is not None
    assert _records_as(backend.probe.ref) == backend.name


@pytest.mark.parametrize("backend", ALL, ids=lambda b: b.name)
def test_what_is_measured_has_a_probe(backend: catalogue.Backend) -> None:
    if backend.quick or backend.compile_per_shape:
        assert backend.probe is not None, f"{backend.name} is measured by tune but names no probe"
    for tactic in backend.tactics:
        assert tactic.compile_s is None or tactic.compile_s > 0


def test_quick_plan_derives_from_the_records() -> None:
    names = catalogue.quick_backends("attention")
    assert names == tuple(n for b in catalogue.backends("attention") for n in b.quick_names())
    assert "HWTUNE_TRITON_ATTN:auto" in names and "HWTUNE_TRITON_ATTN" not in names  # its tuned tactic is not quick
    assert all(catalogue.find(n.partition(":")[0]).quick for n in names)
