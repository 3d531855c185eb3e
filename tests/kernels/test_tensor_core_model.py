"""The tensor-core accumulation model the interpreter's ``--tensor-core-dot`` mode uses (numpy only): exact
where a tensor core is exact, truncating (one-sided) where it is not."""

from __future__ import annotations

import numpy as np

from tests.kernels.tensor_core_model import tensor_core_matmul


def test_exact_when_every_partial_sum_fits_float32() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(-8, 8, (16, 64)).astype(np.float16)
    b = rng.integers(0, 16, (64, 32)).astype(np.float16)
    c = rng.integers(-100, 100, (16, 32)).astype(np.float32)
    expected = c + a.astype(np.float32) @ b.astype(np.float32)
    assert np.array_equal(tensor_core_matmul(a, b, c), expected)


def test_small_products_under_a_large_accumulator_are_dropped_not_rounded() -> None:
    # acc = 1.0 plus 64 products of 2**-28: numpy's float32 gives 1 + 2**-22, but aligned to the
    # accumulator the window of 24 + 3 bits below 2**1 keeps nothing under 2**-26, so each product is dropped
    a = np.full((1, 64), 2.0**-14, dtype=np.float16)
    b = np.full((64, 1), 2.0**-14, dtype=np.float16)
    c = np.ones((1, 1), dtype=np.float32)
    assert tensor_core_matmul(a, b, c)[0, 0] == np.float32(1.0)
    assert (c + a.astype(np.float32) @ b.astype(np.float32))[0, 0] > 1.0


def test_error_is_one_sided_for_positive_addends_and_bounded() -> None:
    rng = np.random.default_rng(1)
    a = rng.uniform(0.0, 1.0, (32, 256)).astype(np.float16)
    b = (1024 + rng.integers(0, 16, (256, 64))).astype(np.float16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    got = tensor_core_matmul(a, b, np.zeros((32, 64), np.float32)).astype(np.float64)
    ulp = 2.0**-23
    rel = (got - exact) / exact / ulp
    assert (rel <= 0).all()  # truncation never rounds up
    assert rel.min() > -256 / 16  # at most about one float32 ulp per MMA step
    assert rel.mean() < -2.0  # a bias of several ulps (about -4.5 here) ...
    rn = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64)
    assert abs(((rn - exact) / exact / ulp).mean()) < 0.5  # ... that numpy's round-to-nearest does not have
