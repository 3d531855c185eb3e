"""Selection: rank the valid backends for a spec from measurements or static priorities, and explain.

Light by contract: importing it never imports torch, flashinfer or triton (a test checks), so engines can
call it at start for microseconds. The vocabulary it ranks with (specs, catalogue, validation, errors)
lives in ``hwtune.core``.
"""

from hwtune.selector.api import resolve_device, select_all2all, select_attention
from hwtune.selector.selection import RankedBackend, Selection

__all__ = ["Selection", "RankedBackend", "select_attention", "select_all2all", "resolve_device"]
