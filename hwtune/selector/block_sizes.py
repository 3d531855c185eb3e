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

from hwtune.core.types import AttentionSpec
from hwtune.selector.layouts import measured_cheapest
from hwtune.selector.selection import Selection

#: KV page sizes engines run (vLLM's --block-size choices 1-256 that kernels take; SGLang's --page-size).
PAGE_SIZES = (1, 16, 32, 64, 128, 256)


def over_block_sizes(select_one: Callable[[AttentionSpec], Selection], spec: AttentionSpec) -> Selection:
    """Select for a spec without a block size: each of ``PAGE_SIZES``'s selection, the measured cheapest wins;
    the selection without a size stands when none was measured."""
    found = measured_cheapest(select_one, {str(size): replace(spec, block_size=size) for size in PAGE_SIZES})
    if found is None:
        return select_one(spec)
    size, best, compared = found
    note = f"no block size given: block size {size} chosen by measured typical latency over the mix ({compared})"
    return replace(best, notes=(note, *best.notes))
