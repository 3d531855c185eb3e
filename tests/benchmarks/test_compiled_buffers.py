"""benchmarks/experiments/compiled_buffers.py: TRITON_ATTN's decode and the MLA kernel compiled for SM 9.0 on this
machine (no GPU), and the software pipeline's buffers read back from the compiled kernels. What they assert is Triton's
pipeliner's (3.6 and 3.9 alike) that the `tuned` spaces' stage counts rely on (hwtune/kernels/mla_configs.py,
docs/kernels.md "Deeper TMA pipelines")."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

pytest.importorskip("triton.backends.compiler", reason="triton is not installed")
import triton  # noqa: E402

if tuple(int(v) for v in re.findall(r"\d+", triton.__version__)[:2]) < (3, 4):
    pytest.skip(f"triton {triton.__version__}: these kernels need 3.4 or later", allow_module_level=True)
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


def _latent_depth(stages: int) -> int:
    kernel, const, descs = cb.mla_config(32, 16, True, 64)
    found = cb.describe(cb.compile_kernel(kernel, const, warps=4, stages=stages, descriptors=descs))
    depths = {int(m.group(1)) for shape in found["buffers"] if (m := re.fullmatch(r"(\d+)x32x512xbf16", shape))}
    assert len(depths) == 1, found
    return depths.pop()


def test_the_mla_tma_tiles_hold_one_two_and_three_latent_buffers_at_3_6_and_8_stages() -> None:
    assert [_latent_depth(st) for st in (3, 6, 8)] == [1, 2, 3]
