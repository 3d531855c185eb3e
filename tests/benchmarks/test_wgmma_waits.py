"""benchmarks/experiments/wgmma_waits.py: where Triton's compiler waits for the warpgroup MMAs of TRITON_ATTN's
prefill loop and of an online-softmax loop software-pipelined by hand, compiled for SM 9.0 on this machine (no GPU).
What they assert is the compiler's (Triton 3.6 and 3.9 alike), which docs/kernels.md "Limits" (against fa3) relies
on: each tile's Q.K^T MMA is waited for before its softmax, so the softmax overlaps no MMA, even when the next tile's
Q.K^T is issued first. A Triton that keeps it in flight fails them: then the overlap is worth measuring."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("triton.backends.compiler", reason="triton is not installed")
import triton  # noqa: E402

if tuple(int(v) for v in re.findall(r"\d+", triton.__version__)[:2]) < (3, 4):
    pytest.skip(f"triton {triton.__version__}: these kernels need 3.4 or later", allow_module_level=True)
from benchmarks.experiments import wgmma_waits as ww  # noqa: E402

#: One tile of the loop as compiled: its copies waited for, Q.K^T issued and waited for (nothing left in flight), the
#: exponentials, P.V issued and left in flight.
TILE = ["async_wait", "dot(async)", "dot_wait(pendings=0)", "exp2", "dot(async)"]


def test_the_prefill_loops_wait_for_each_tiles_scores_before_its_softmax() -> None:
    loops = ww.loop_ops(ww.compile_attn_prefill().asm["ttgir"])
    assert loops == [TILE, TILE]  # the unmasked tiles (a block-table chunk at a time) and the diagonal ones


@pytest.mark.parametrize("fn", [ww._mini, ww._mini_pipelined], ids=["as_written", "pipelined_by_hand"])
def test_issuing_the_next_tiles_scores_first_does_not_keep_them_in_flight(fn) -> None:  # noqa: ANN001
    compiled = ww.compile_mini(fn)
    assert ww.loop_ops(compiled.asm["ttgir"]) == [TILE]
    (ptx,) = ww.ptx_loops(compiled.asm["ptx"])
    scores, wait, exps = ptx.index("wgmma x8"), ptx.index("wgmma_wait(0)"), ptx.index("ex2 x66")
    assert scores < wait < exps and "barrier" in ptx[:scores]
