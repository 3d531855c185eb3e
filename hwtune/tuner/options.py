"""What a tune run may be asked to do, checked before anything is measured: options, kinds, backends and
the device to measure on. The CLI parses; these rules decide (so the library and the CLI agree)."""

from __future__ import annotations

from dataclasses import dataclass

from hwtune.core import catalogue
from hwtune.core.devices import CPU_PROFILE, DeviceProfile
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


def parse_kinds(text: str) -> list[str]:
    """``"attention,all2all"`` -> the kinds, each known."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    if not kinds or set(kinds) - set(KINDS):
        raise InvalidSpecError(f"--kinds takes attention and/or all2all, not {text!r}")
    return kinds


def parse_backends(text: str | None) -> tuple[str, ...] | None:
    """``"FLASHINFER,TRITON_ATTN:auto"`` -> names as given; an unknown backend is an error listing the known."""
    if not text:
        return None
    names = []
    for given in (b.strip() for b in text.split(",") if b.strip()):
        backend, sep, tactic = given.partition(":")
        names.append(catalogue.get_any(backend).name + sep + tactic)  # the catalogue's spelling
    return tuple(names) or None


def parse_quant_dtypes(values: list[str] | None) -> tuple[str, ...] | None:
    """``["nvfp4", "bf16,fp8"]`` (repeated or comma-separated ``--quant-dtype``) -> the activation dtypes, each known
    and in its canonical spelling; None when none was given (the plan then follows the model)."""
    out: list[str] = []
    for value in values or ():
        for given in (v.strip() for v in value.split(",")):
            if not given:
                continue
            if given.lower() not in QUANT_DTYPE_ALIASES:
                known = ", ".join(sorted(set(QUANT_DTYPE_ALIASES.values())))
                raise InvalidSpecError(
                    f"--quant-dtype takes the activation dtypes the engine dispatches to the experts: {known} "
                    f"(repeat the option or comma-separate), not {given!r}"
                )
            out.append(normalize_quant_dtype(given))
    return tuple(dict.fromkeys(out)) or None


def resolve_profile(device: str) -> DeviceProfile:
    """The profile a run measures on: this node's GPU (NVML), or the CPU profile for ``cpu`` or no GPU."""
    from hwtune.core.detect import detect

    profile = detect()
    if device == "cuda" and not profile.is_cuda:
        raise InvalidSpecError(
            "--device cuda: no NVIDIA GPU was found on this node (NVML saw none); "
            "run on the GPU node, or use --device cpu to exercise the pipeline on the CPU"
        )
    if device == "cpu" or (device == "auto" and not profile.is_cuda):
        return CPU_PROFILE
    return profile
