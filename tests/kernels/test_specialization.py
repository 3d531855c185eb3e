"""Which kernel integers Triton may specialise on (CPU: the decorators' declared lists; the GPU test that counts
compiled variants is in test_gpu.py)."""

from __future__ import annotations

import pytest

from hwtune.kernels import _common, split_kv, triton_attention, triton_mla

pytestmark = pytest.mark.skipif(
    _common.interpreting(), reason="TRITON_INTERPRET is set: the interpreter compiles nothing and specialises nothing"
)


@pytest.mark.parametrize(
    "kernel",
    [
        triton_attention._paged_attn_kernel,
        triton_mla._mla_decode_kernel,
        split_kv._merge_kernel,
        split_kv._merge_rows_kernel,
    ],
    ids=lambda k: k.__name__,
)
def test_workload_integers_are_not_specialised(kernel) -> None:  # noqa: ANN001 - a Triton JITFunction
    generic = {p.name for p in kernel.params if p.do_not_specialize}
    workload_args = {p.name for p in kernel.params} & set(_common.WORKLOAD_INTS)
    assert workload_args and generic == workload_args


def test_every_workload_integer_names_a_kernel_argument() -> None:
    used = set()
    kernels = (triton_attention._paged_attn_kernel, triton_mla._mla_decode_kernel, split_kv._merge_kernel,
               split_kv._merge_rows_kernel)  # fmt: skip
    for k in kernels:
        used |= {p.name for p in k.params}
    assert set(_common.WORKLOAD_INTS) <= used


def test_the_row_merges_row_count_follows_the_batch_unspecialised() -> None:
    """``_merge_rows_kernel``'s ``num_rows`` (tokens x heads) changes with every batch: specialising on it (divisible
    by 16 or not) would compile the merge again for odd and even token counts."""
    generic = {p.name for p in split_kv._merge_rows_kernel.params if p.do_not_specialize}
    assert {"batch", "num_splits", "num_rows"} <= generic
