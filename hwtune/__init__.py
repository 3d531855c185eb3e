"""hwtune: which attention and MoE all2all backend is correct and fastest for this model on this GPU.

``import hwtune`` stays light (no torch, flashinfer or triton) so that engines can call
``hwtune.select_attention(...)`` / ``hwtune.select_all2all(...)`` at start.
"""

import logging

from hwtune._version import __version__
from hwtune.core.devices import DeviceProfile
from hwtune.core.errors import (
    BackendNotValidError,
    HwtuneError,
    InvalidSpecError,
    NoValidBackendError,
    UnknownBackendError,
)
from hwtune.core.types import All2AllSpec, All2AllWorkload, AttentionSpec, AttentionWorkload
from hwtune.core.validation import validate
from hwtune.selector import RankedBackend, Selection, select_all2all, select_attention

# A library logs and lets the application decide where it goes (the CLI's -v/-q do; logging.basicConfig does).
logging.getLogger("hwtune").addHandler(logging.NullHandler())

__all__ = [
    "__version__",
    "AttentionSpec",
    "AttentionWorkload",
    "All2AllSpec",
    "All2AllWorkload",
    "DeviceProfile",
    "Selection",
    "RankedBackend",
    "select_attention",
    "select_all2all",
    "validate",
    "HwtuneError",
    "InvalidSpecError",
    "UnknownBackendError",
    "BackendNotValidError",
    "NoValidBackendError",
]
