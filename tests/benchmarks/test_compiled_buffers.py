"""benchmarks/experiments/compiled_buffers.py: TRITON_ATTN's decode compiled for SM 9.0 on this machine (no GPU), and
the software pipeline's K/V buffers read back from the compiled kernel."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

pytest.importorskip("triton.backends.compiler", reason="triton is not installed")
import triton  # noqa: E402

if not (Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump").exists():
    pytest.skip("this triton has no bundled cuobjdump", allow_module_level=True)

from benchmarks.experiments import compiled_buffers as cb  # noqa: E402


def _kv_depth(stages: int) -> tuple[int, dict]:
    args = argparse.Namespace(batch=32, query_len=1, group=8, head=128, page=16)
    kernel, const, _ = cb.attn_config(64, 3, 4, stages, args)
    found = cb.describe(cb.compile_kernel(kernel, const, warps=4, stages=stages))
    depths = {int(m.group(1)) for shape in found["buffers"] if (m := re.fullmatch(r"(\d+)x64x128xbf16", shape))}
    assert len(depths) == 1, found
    return depths.pop(), found


def test_a_decode_config_holds_more_kv_buffers_only_past_the_stages_the_block_table_load_takes() -> None:
    """The block-table load in the decode loop takes a share of the stages: 3 stages leave the K and V tiles one
    buffer, 5 stages two (what docs/kernels.md says of the decode space)."""
    three, at_three = _kv_depth(3)
    five, at_five = _kv_depth(5)
    assert (three, five) == (1, 2)
    assert at_five["smem"] > at_three["smem"] and at_three["regs"] and at_three["cp_async"] > 0
