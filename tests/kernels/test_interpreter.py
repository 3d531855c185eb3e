"""hwtune's Triton kernels against float32 references, run by Triton's interpreter on the CPU.

The grid (tests/kernels/grid.py INTERP_CASES) runs once per session in two subprocesses (this
machine class has 2 cores) with TRITON_INTERPRET=1 set before triton is imported; each case is then one
test here. See interp_runner.py for the one interpreter bug worked around (bf16 ``tl.dot``).

grid.TENSOR_CORE_CASES run a second time with ``--tensor-core-dot``: ``tl.dot`` accumulating like a tensor
core (one-sided truncation, tensor_core_model.py) rather than numpy's round-to-nearest, the difference that
let TURBOQUANT pass here and fail on an H100.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip(
    "triton",
    reason="triton is not installed (a CPU install leaves it out): `pip install triton` runs these",
)

from tests.kernels.grid import INTERP_CASES, TENSOR_CORE_CASES

ROOT = Path(__file__).resolve().parents[2]
SHARDS = 2


def _run_shard(shard: int, *flags: str, shards: int = SHARDS) -> dict:
    env = dict(
        os.environ,
        TRITON_INTERPRET="1",
        PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        OMP_NUM_THREADS="1",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tests.kernels.interp_runner", "--shard", f"{shard}/{shards}", *flags],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"interpreter runner shard {shard} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def interp_results() -> dict:
    with ThreadPoolExecutor(SHARDS) as pool:
        shards = list(pool.map(_run_shard, range(SHARDS)))
    return {k: v for shard in shards for k, v in shard.items()}


@pytest.fixture(scope="session")
def tensor_core_results() -> dict:
    with ThreadPoolExecutor(SHARDS) as pool:
        shards = list(pool.map(lambda shard: _run_shard(shard, "--tensor-core-dot"), range(SHARDS)))
    return {k: v for shard in shards for k, v in shard.items()}


def _assert_passed(case: str, result: dict) -> None:
    assert "error" not in result, result.get("error")
    failed = {k: v for k, (v, limit) in result["checks"].items() if not v <= limit}
    assert not failed, f"{case}: checks over their limits {failed} (all: {result['checks']})"


@pytest.mark.parametrize("case", sorted(INTERP_CASES))
def test_kernel_case_in_interpreter(case: str, interp_results: dict) -> None:
    _assert_passed(case, interp_results[case])


@pytest.mark.parametrize("case", sorted(TENSOR_CORE_CASES))
def test_kernel_case_with_tensor_core_accumulation(case: str, tensor_core_results: dict) -> None:
    _assert_passed(case, tensor_core_results[case])


#: prefill-style cases of both kernels, run again with the L2-friendly program order (KV head on axis 1)
#: that big contexts get on a GPU; the interpreter's small shapes otherwise always take the heads-fast order
L2_ORDER_CASES = (
    "prefill_prefix_d128_multi_tile",
    "prefill_default_config",
    "mixed_batch_split2",
    "tq_prefill_fp16_4bit",
)


@pytest.fixture(scope="session")
def no_l2_results() -> dict:
    return _run_shard(0, "--no-l2", *L2_ORDER_CASES, shards=1)


@pytest.mark.parametrize("case", L2_ORDER_CASES)
def test_prefill_case_with_the_l2_friendly_order(case: str, no_l2_results: dict, interp_results: dict) -> None:
    _assert_passed(case, no_l2_results[case])
    assert no_l2_results[case]["heads_fast"] and not any(no_l2_results[case]["heads_fast"])
    # the same case in the main grid (an L2 of 50 MiB, KV of a few KiB) ran heads-fast
    assert all(interp_results[case]["heads_fast"]), interp_results[case]["heads_fast"]
