"""Selector: catalogue, validation, priorities, ranking, errors, engine adapters.

Light by contract: importing it never imports torch, flashinfer or triton (a test checks), so engines can
call it at start for microseconds.
"""

from hwtune.selector.device import DeviceProfile, simulated
from hwtune.selector.errors import (
    BackendNotValidError, HwtuneError, InvalidSpecError, NoValidBackendError, UnknownBackendError,
)
from hwtune.selector.select import resolve_device, select_all2all, select_attention
from hwtune.selector.selection import RankedBackend, Selection
from hwtune.selector.types import All2AllSpec, All2AllWorkload, AttentionSpec, AttentionWorkload
from hwtune.selector.validation import check, validate

__all__ = [
    "AttentionSpec", "AttentionWorkload", "All2AllSpec", "All2AllWorkload", "DeviceProfile", "Selection",
    "RankedBackend", "select_attention", "select_all2all", "validate", "check", "simulated", "resolve_device",
    "HwtuneError", "InvalidSpecError", "UnknownBackendError", "BackendNotValidError", "NoValidBackendError",
]
