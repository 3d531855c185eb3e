"""The randomised Hadamard rotation: orthogonal, dot-product preserving, invertible, seeded."""

from __future__ import annotations

import math

import pytest
import torch

from hwtune.kernels import hadamard


@pytest.mark.parametrize("n", [1, 2, 4, 32, 64, 128, 256])
def test_hadamard_rows_are_orthogonal(n: int) -> None:
    h = hadamard.hadamard_matrix(n, dtype=torch.float64)
    assert torch.equal(h @ h.T, n * torch.eye(n, dtype=torch.float64))
    assert torch.equal(h, h.T)
    assert set(h.unique().tolist()) <= {-1.0, 1.0}


def test_entries_follow_the_popcount_rule_the_kernels_use() -> None:
    n = 128
    parity = torch.tensor([[(a & b).bit_count() & 1 for b in range(n)] for a in range(n)])
    assert torch.equal(hadamard.hadamard_matrix(n), 1.0 - 2.0 * parity.float())


def test_non_power_of_two_is_refused() -> None:
    with pytest.raises(ValueError, match="power-of-two"):
        hadamard.hadamard_matrix(96)


def test_signs_are_seeded_and_per_head() -> None:
    a = hadamard.random_signs(4, 128, seed=3)
    assert torch.equal(a, hadamard.random_signs(4, 128, seed=3))
    assert not torch.equal(a, hadamard.random_signs(4, 128, seed=4))
    assert not torch.equal(a[0], a[1])
    assert set(a.unique().tolist()) == {-1.0, 1.0}


@pytest.mark.parametrize("d", [64, 128, 256])
def test_rotation_preserves_dot_products_and_inverts(d: int) -> None:
    g = torch.Generator().manual_seed(0)
    signs = hadamard.random_signs(3, d, seed=1)
    q = torch.randn(5, 3, d, generator=g, dtype=torch.float64)
    k = torch.randn(7, 3, d, generator=g, dtype=torch.float64)
    rq, rk = hadamard.rotate(q, signs), hadamard.rotate(k, signs)
    dots = torch.einsum("qhd,khd->hqk", q.float(), k.float())
    assert torch.allclose(torch.einsum("qhd,khd->hqk", rq, rk), dots, atol=1e-4)
    assert torch.allclose(hadamard.unrotate(rq, signs), q.float(), atol=1e-5)
    assert torch.allclose(rq.norm(dim=-1), q.float().norm(dim=-1), rtol=1e-5)


def test_half_split_recursion_matches_the_full_transform() -> None:
    """The kernels' form: rotate(x) = [(u_lo + u_hi) @ H_half, (u_lo - u_hi) @ H_half] / sqrt(D)."""
    d = 128
    signs = hadamard.random_signs(1, d, seed=2)
    x = torch.randn(9, 1, d)
    u = x * signs
    h = hadamard.hadamard_matrix(d // 2)
    lo, hi = u[..., : d // 2], u[..., d // 2 :]
    halves = torch.cat([(lo + hi) @ h, (lo - hi) @ h], dim=-1) / math.sqrt(d)
    assert torch.allclose(halves, hadamard.rotate(x, signs), atol=1e-5)


def test_rotation_spreads_an_outlier_channel() -> None:
    x = torch.randn(256, 1, 128)
    x[..., 5] *= 50.0
    r = hadamard.rotate(x, hadamard.random_signs(1, 128))
    peak = lambda t: (t.abs().amax(-1) / t.pow(2).mean(-1).sqrt()).mean().item()
    assert peak(x) > 8.0 and peak(r) < 4.5  # max/rms: near sqrt(128) for one spike, ~3 for Gaussian
