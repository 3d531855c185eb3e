"""The randomised Hadamard transform TurboQuant rotates K, V and Q with, in plain PyTorch.

WHY a rotation: keys have a few channels far larger than the rest (outlier channels). A per-vector scalar
quantizer sizes its step to the largest coordinate, so those channels crush every other one to a handful
of codes. An orthogonal transform ``R`` leaves every dot product unchanged (``(Rq).(Rk) = q.k``) while
spreading an outlier's energy over all coordinates, so after rotation the coordinates look Gaussian and a
scalar quantizer loses far less. A Hadamard matrix times a random sign diagonal is such an ``R``, cheap to
apply, and fixed per KV head by a seed.

Convention (row vectors, ``D`` a power of two, ``H`` the Sylvester Hadamard matrix of +-1, symmetric):
``rotate(x) = ((x * signs) @ H) / sqrt(D)`` and ``unrotate(y) = ((y @ H) / sqrt(D)) * signs``.

The Triton kernels never build the D x D matrix: Sylvester's recursion ``H_D = [[H, H], [H, -H]]`` with
``H = H_{D/2}`` gives ``rotate(x) = [(u_lo + u_hi) @ H, (u_lo - u_hi) @ H] / sqrt(D)`` with ``u = x * signs``
split into halves, which matches TurboQuant's half-split code layout; this module is the reference they
are checked against.
"""

from __future__ import annotations

import functools
import math

import torch


def is_power_of_two(n: int) -> bool:
    """Whether ``n`` is a positive power of two: Sylvester's construction exists only for those sizes."""
    return n >= 1 and n & (n - 1) == 0


@functools.lru_cache(maxsize=16)
def _hadamard_cpu(n: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float32)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], dim=1), torch.cat([h, -h], dim=1)], dim=0)
    return h


def hadamard_matrix(n: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """The n x n Sylvester Hadamard matrix of +-1 (``H @ H.T == n * I``); entry (i, j) is
    ``(-1) ** popcount(i & j)``."""
    if not is_power_of_two(n):
        raise ValueError(f"a Sylvester Hadamard matrix needs a power-of-two size, got {n}")
    return _hadamard_cpu(n).to(device=device, dtype=dtype)


def random_signs(num_heads: int, head_size: int, *, seed: int = 0, device: torch.device | str = "cpu") -> torch.Tensor:
    """float32 [num_heads, head_size] of +-1, drawn from a CPU generator so the same seed gives the same
    rotation on every machine and device."""
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    bits = torch.randint(0, 2, (num_heads, head_size), generator=gen, dtype=torch.int64)
    return (1.0 - 2.0 * bits.to(torch.float32)).to(device)


def rotate(x: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """Rotate row vectors ``x[..., H, D]`` by head ``h``'s transform (``signs[h]``); float32 result."""
    d = x.shape[-1]
    h = hadamard_matrix(d, device=x.device)
    return ((x.float() * signs.to(x.device)) @ h) / math.sqrt(d)


def unrotate(y: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`rotate` (the transform is orthogonal: its inverse is its transpose)."""
    d = y.shape[-1]
    h = hadamard_matrix(d, device=y.device)
    return ((y.float() @ h) / math.sqrt(d)) * signs.to(y.device)
