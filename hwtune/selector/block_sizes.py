"""The KV block size of a selection from hwtune's own catalogue (no engine, or an engine on a device its snapshot
does not cover): a given size is kept; with none given, the sizes engines page by (``PAGE_SIZES``) at which the
store holds measurements of this spec compete, and the measured cheapest wins. Its selection names the size
(``spec.block_size``) and a note says what was compared, so the engine is started with the size measured fastest
(issue 19: block size is part of the choice). Without measurements at any size the selection is the static one, as
before. An engine target on a CUDA device reads each backend at the engine's own size instead
(``engine_select.block_lookups``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from hwtune.core.errors import BackendNotValidError, NoValidBackendError
from hwtune.core.types import AttentionSpec
from hwtune.selector.layouts import measured_cost
from hwtune.selector.selection import Selection

#: KV page sizes engines run (vLLM's --block-size choices 1-256 that kernels take; SGLang's --page-size).
PAGE_SIZES = (1, 16, 32, 64, 128, 256)


def over_block_sizes(select_one: Callable[[AttentionSpec], Selection], spec: AttentionSpec) -> Selection:
    """Select for a spec without a block size: each of ``PAGE_SIZES``'s selection, the measured cheapest wins;
    the selection without a size stands when none was measured."""
    base = select_one(spec)
    measured: list[tuple[float, int, Selection]] = []
    for size in PAGE_SIZES:
        try:
            sel = select_one(replace(spec, block_size=size))
        except (NoValidBackendError, BackendNotValidError):
            continue  # nothing (or not the requested backend) serves this size: another may
        cost = measured_cost(sel)
        if cost is not None:
            measured.append((cost, size, sel))
    if not measured:
        return base
    measured.sort(key=lambda m: m[0])
    cost, size, best = measured[0]
    compared = "; ".join(f"{s}: {sel.backend} ~{c:.1f} us" for c, s, sel in measured)
    note = f"no block size given: block size {size} chosen by measured cost over the mix ({compared})"
    return replace(best, notes=(note, *best.notes))
