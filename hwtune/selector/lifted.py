"""A catalogue rule lifted by measurement: an all2all activation-dtype rule, and nothing else, opened for one spec.

The catalogue restricts some all2all backends to activation dtypes (the one-sided NVLink kernel to nvfp4: its
workspace was sized for nvfp4 and corrupted bf16 data in a real engine). Such a rule, and only such a rule
(``validation.LIFTABLE_BY_MEASUREMENT``), is lifted for a spec when this environment's store holds a measurement of
that backend for that exact spec (dtype, hidden size, EP size, experts, top-k, nodes: the spec key) that passed the
correctness gate (``ok``), and none of it in this environment crashed or gave a wrong answer. Measurements from
another environment, of another spec, or that failed, never lift it; a backend with any other rejection stays
rejected. docs/selection.md, "A rule lifted by measurement".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hwtune.core.catalogue import Backend
from hwtune.core.devices import DeviceProfile
from hwtune.core.records import DISQUALIFYING
from hwtune.core.types import All2AllSpec, Spec
from hwtune.core.validation import Rejection, check, only_liftable, with_dtype_lifted


@dataclass
class Tested:
    """This environment's stored outcomes of one backend for one spec: who passed the correctness gate (host, date)
    and what failed (a sentence each)."""

    passed: list[tuple[str, str]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def tested_here(rows: Iterable[tuple], env_hash: str) -> dict[str, Tested]:
    """Per backend, the outcomes in store rows (``hwtune.db.sqlite_direct`` column order) of one spec that were
    measured in this environment (``env_hash``); rows of other environments are left out."""
    out: dict[str, Tested] = {}
    for row in rows:
        backend, tactic, status, median, message, host, created, h = row[7:15]
        if h != env_hash:
            continue
        tested = out.setdefault(backend, Tested())
        date = str(created)[:10]
        if status == "ok" and median is not None:
            tested.passed.append((str(host), date))
        elif status in DISQUALIFYING:
            first = message.splitlines()[0] if message else status
            tested.failed.append(f"{status.replace('_', ' ')} (tactic {tactic}, host {host}, {date}): {first}")
    return out


def _evidence_words(passed: list[tuple[str, str]]) -> str:
    """ "3 passing measurement(s) (host node-a, 2026-11-20; host node-b, 2026-11-21)": distinct (host, date) pairs."""
    pairs = sorted(set(passed))
    shown = "; ".join(f"host {host}, {date}" for host, date in pairs[:4])
    more = f"; and {len(pairs) - 4} more" if len(pairs) > 4 else ""
    return f"{len(passed)} passing correctness measurement(s) ({shown}{more})"


def lift(
    backend: Backend,
    spec: Spec,
    device: DeviceProfile,
    reasons: list[Rejection],
    tested: Mapping[str, Tested] | None,
    *,
    assume_installed: bool,
) -> tuple[Backend | None, list[Rejection], str | None]:
    """(the lifted record, no reasons, a note) when ``backend``'s only rejection is its activation-dtype rule and this
    environment's store shows it passing, and never failing, for this exact ``spec``; else (None, the reasons, None),
    with a reason added when a stored failure is what keeps the rule closed."""
    if not isinstance(spec, All2AllSpec) or tested is None or not only_liftable(reasons):
        return None, reasons, None
    found = tested.get(backend.name)
    if found is None or not found.passed:
        return None, reasons, None
    if found.failed:
        why = (
            f"{backend.name} passed the correctness gate in this environment for {spec.quant_dtype} "
            f"({_evidence_words(found.passed)}), but its dtype rule stays: it also failed here, "
            f"{found.failed[0]}"
        )
        return None, [*reasons, Rejection("measured", why)], None
    lifted = with_dtype_lifted(backend, spec)
    if check(lifted, spec, device, assume_installed=assume_installed):  # a tactic's own rule still says no
        return None, reasons, None
    allowed = ", ".join(sorted(backend.rules.quant_dtypes or ()))
    note = (
        f"{backend.name}: the catalogue accepts only {allowed} activations; that rule is lifted for "
        f"{spec.quant_dtype} at EP {spec.ep_size}, hidden size {spec.hidden_size} (this exact spec) in this "
        f"environment by {_evidence_words(found.passed)} and no crash or wrong answer (the kernel is correct here; "
        f"where the rule comes from an engine's own check, that engine may still refuse it: "
        f"{backend.sources.get('quant_dtypes', 'no source')})"
    )
    return lifted, [], note
