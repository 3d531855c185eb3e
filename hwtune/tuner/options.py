"""What a tune run may be asked to do, checked before anything is measured: options, kinds, backends and
the device to measure on. The CLI parses; these rules decide (so the library and the CLI agree)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from hwtune.core import catalogue
from hwtune.core.devices import CPU_PROFILE, DeviceProfile, simulated
from hwtune.core.errors import InvalidSpecError
from hwtune.core.types import QUANT_DTYPE_ALIASES, normalize_quant_dtype

KINDS = ("attention", "all2all")
DEVICES = ("auto", "cuda", "cpu")


@dataclass(frozen=True)
class TuneOptions:
    """How a run measures: which backends, within what budget, with which leases, resuming or afresh."""

    backends: tuple[str, ...] | None = None
    budget_s: float | None = None
    time_cap_s: float | None = None  # None: the plan's
    timeout_s: float = 600.0
    resume: bool = False
    fresh: bool = False
    device: str = "auto"  # auto | cuda | cpu
    lease_s: float = 120.0
    warmup: bool = True
    warmup_parallel: int = 4
    seed: int = 0
    #: Measure new points between neighbours whose winners differ, until each crossover is located
    #: (``tuner.schedule.bisections``); off for quick plans and fixed sets.
    bisect: bool = True

    def check(self) -> None:
        """Raise InvalidSpecError, in the words of the option, for anything a run cannot honour."""
        if self.budget_s is not None and self.budget_s <= 0:
            raise InvalidSpecError("--budget must be a positive number of minutes")
        if self.lease_s < 3:
            raise InvalidSpecError("--lease must be at least 3 seconds (the heartbeat renews it every lease/3)")
        if self.resume and self.fresh:
            raise InvalidSpecError("--resume continues a run and --fresh starts over: give one")
        if self.device not in DEVICES:
            raise InvalidSpecError(
                f"--device takes auto, cuda or cpu, not {self.device!r} (to plan for another "
                "GPU model without it, use `hwtune select --device NAME`; tuning measures "
                "this node)"
            )
        if self.time_cap_s is not None and self.time_cap_s <= 0:
            raise InvalidSpecError("--time-cap must be a positive number of seconds")
        if self.timeout_s <= 0:
            raise InvalidSpecError(
                "--timeout must be a positive number of seconds (a candidate that has not answered by then is "
                "killed and recorded as a timeout)"
            )


def split_list(values: str | Iterable[str] | None) -> list[str]:
    """The one list style of the CLI: an option repeated, comma-separated, or both (``--kinds attention --kinds
    all2all`` = ``--kinds attention,all2all``), as a list of non-empty, stripped items."""
    if values is None:
        return []
    items = [values] if isinstance(values, str) else list(values)
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def parse_kinds(values: str | Iterable[str]) -> list[str]:
    """``"attention,all2all"`` (or the option repeated) -> the kinds, each known."""
    kinds = split_list(values)
    if not kinds or set(kinds) - set(KINDS):
        raise InvalidSpecError(f"--kinds takes attention and/or all2all, not {','.join(kinds) or 'nothing'!r}")
    return list(dict.fromkeys(kinds))


def parse_backends(values: str | Iterable[str] | None) -> tuple[str, ...] | None:
    """``"FLASHINFER,HWTUNE_TRITON_ATTN:auto"`` (or the option repeated) -> names in the catalogue's spelling; an
    unknown backend is an error listing the known."""
    names = []
    for given in split_list(values):
        backend, sep, tactic = given.partition(":")
        names.append(catalogue.get_any(backend).name + sep + tactic)  # the catalogue's spelling
    return tuple(dict.fromkeys(names)) or None


def parse_quant_dtypes(values: list[str] | None) -> tuple[str, ...] | None:
    """``["nvfp4", "bf16,fp8"]`` (repeated or comma-separated ``--quant-dtype``) -> the activation dtypes, each known
    and in its canonical spelling; None when none was given (the plan then follows the model)."""
    out: list[str] = []
    for given in split_list(values):
        if given.lower() not in QUANT_DTYPE_ALIASES:
            known = ", ".join(sorted(set(QUANT_DTYPE_ALIASES.values())))
            raise InvalidSpecError(
                f"--quant-dtype takes the activation dtypes the engine dispatches to the experts: {known} "
                f"(repeat the option or comma-separate), not {given!r}"
            )
        out.append(normalize_quant_dtype(given))
    return tuple(dict.fromkeys(out)) or None


def resolve_profile(device: str, dry_run: bool = False) -> DeviceProfile:
    """The profile a run measures on: this node's GPU (NVML), or the CPU profile for ``cpu`` or no GPU. A named
    device (``sm100``, ``h100``, ...) is planned for with ``dry_run``; measuring needs that device here."""
    from hwtune.core.detect import detect

    if device not in DEVICES:
        wanted = simulated(device)  # an unknown name is an error listing the known ones
        if dry_run:
            return wanted
        here = detect()
        if here.is_cuda and here.compute_capability == wanted.compute_capability:
            return here  # the named device is this node's kind: measure it
        raise InvalidSpecError(
            f"--device {device}: measuring needs that device, and this node has "
            f"{here.describe() if here.is_cuda else 'no CUDA GPU'}. Add --dry-run to plan for a {wanted.name} "
            "(its workloads and estimated time), or run `hwtune tune` on such a node"
        )
    profile = detect()
    if device == "cuda" and not profile.is_cuda:
        raise InvalidSpecError(
            "--device cuda: no NVIDIA GPU was found on this node (NVML saw none); "
            "run on the GPU node, or use --device cpu to exercise the pipeline on the CPU"
        )
    if device == "cpu" or (device == "auto" and not profile.is_cuda):
        return CPU_PROFILE
    return profile
