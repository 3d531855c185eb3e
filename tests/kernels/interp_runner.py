"""Run the interpreter case grid in this process under TRITON_INTERPRET=1 and print JSON results.

Usage: ``python -m tests.kernels.interp_runner [--shard I/N] [--tensor-core-dot] [--no-l2] [case ...]``.
It must be a fresh process: Triton decides at decoration time whether a kernel is interpreted, so the
variable has to be set before ``triton`` and the kernel modules are imported (the pytest session may
already have imported them).

Interpreter fix applied here (and only here): Triton 3.9's interpreter stores bfloat16 as raw uint16 and
``tl.dot`` multiplies those bit patterns, so a bf16 dot returns garbage on the CPU. The patch converts bf16
operands to float32 before the interpreter's numpy matmul (the GPU computes bf16 x bf16 products exactly
into float32 accumulators, so this is the same arithmetic). Without it every bf16 case would fail for a
reason that is not in hwtune's kernels.

``--tensor-core-dot`` (default cases: grid.TENSOR_CORE_CASES) makes every 16-bit ``tl.dot`` accumulate the
way a tensor core does (tensor_core_model.py: aligned, truncated, one-sided) instead of numpy's float32
round-to-nearest, so a kernel that only the GPU's accumulation breaks fails here too. fp8 dots keep the
interpreter's own arithmetic.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import numpy as np

os.environ["TRITON_INTERPRET"] = "1"

import triton.language as tl
from triton.runtime import interpreter as _interp

from tests.kernels.tensor_core_model import tensor_core_matmul

_create_dot = _interp.InterpreterBuilder.create_dot
TENSOR_CORE_DOT = {"on": False}  # set by --tensor-core-dot


def _patched_dot(self, a, b, d, input_precision, max_num_imprecise_acc):  # type: ignore[no-untyped-def]
    sixteen_bit = {a.dtype.scalar, b.dtype.scalar} <= {tl.float16, tl.bfloat16}
    if a.dtype.scalar == tl.bfloat16:
        a = self.cast_impl(a, tl.float32)
    if b.dtype.scalar == tl.bfloat16:
        b = self.cast_impl(b, tl.float32)
    if TENSOR_CORE_DOT["on"] and sixteen_bit and d.data.dtype == np.float32 and a.data.ndim == 2:
        return _interp.TensorHandle(tensor_core_matmul(a.data, b.data, d.data), d.dtype.scalar)
    return _create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)


_interp.InterpreterBuilder.create_dot = _patched_dot


def _record_program_orders() -> list[bool]:
    """Wrap both kernels' ``plan_launch`` to record each launch's program order (``heads_fast``), so the
    tests can check which order a case ran in."""
    from hwtune.kernels import triton_attention, turboquant

    seen: list[bool] = []

    def wrap(plan_launch):  # type: ignore[no-untyped-def]
        def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
            plan = plan_launch(*args, **kwargs)
            seen.append(plan.heads_fast)
            return plan

        return spy

    triton_attention.plan_launch = wrap(triton_attention.plan_launch)
    turboquant.plan_launch = wrap(turboquant.plan_launch)
    return seen


def main(argv: list[str]) -> int:
    import torch

    from tests.kernels.grid import INTERP_CASES, TENSOR_CORE_CASES

    torch.set_num_threads(1)
    shard, n_shards = 0, 1
    names = []
    it = iter(argv)
    for arg in it:
        if arg == "--shard":
            shard, n_shards = (int(x) for x in next(it).split("/"))
        elif arg == "--tensor-core-dot":
            TENSOR_CORE_DOT["on"] = True
        elif arg == "--no-l2":  # an L2 of 0 bytes: prefill launches keep the (query tile, KV head) order
            from hwtune.kernels import triton_attention, turboquant

            triton_attention.l2_bytes = turboquant.l2_bytes = lambda device: 0
        else:
            names.append(arg)
    names = names or sorted(TENSOR_CORE_CASES if TENSOR_CORE_DOT["on"] else INTERP_CASES)
    names = [n for i, n in enumerate(names) if i % n_shards == shard]
    results = {}
    orders = _record_program_orders()
    for name in names:
        start = time.perf_counter()
        orders.clear()
        try:
            checks = INTERP_CASES[name]("cpu")
            results[name] = {"checks": {k: [float(v), float(lim)] for k, (v, lim) in checks.items()}}
        except Exception:
            results[name] = {"error": traceback.format_exc()}
        results[name]["heads_fast"] = list(orders)
        results[name]["seconds"] = round(time.perf_counter() - start, 2)
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
