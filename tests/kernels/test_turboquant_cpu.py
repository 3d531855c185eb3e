"""TurboQuant's quantizer and cache format in plain PyTorch (no Triton): round-trip error bounds, the
benefit of the rotation on outlier channels, memory per token, the cache layouts."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip(
    "triton",
    reason="triton is not installed (a CPU install leaves it out): `pip install triton` runs these",
)

from hwtune.kernels import hadamard
from hwtune.kernels import turboquant as tq


def _rel_err(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (x_hat - x).norm(dim=-1) / x.norm(dim=-1)


def _round_trip(x: torch.Tensor, bits: int, seed: int = 0) -> torch.Tensor:
    signs = hadamard.random_signs(x.shape[-2], x.shape[-1], seed=seed)
    codes, scale, zero = tq.quantize_reference(x, signs, bits)
    return tq.dequantize_reference(codes, scale, zero, signs)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_codes_are_within_half_a_step_in_the_rotated_space(bits: int, d: int) -> None:
    x = torch.randn(512, 2, d, generator=torch.Generator().manual_seed(d))
    signs = hadamard.random_signs(2, d)
    codes, scale, zero = tq.quantize_reference(x, signs, bits)
    assert int(codes.min()) >= 0 and int(codes.max()) <= (1 << bits) - 1
    r = hadamard.rotate(x, signs)
    r_hat = tq.dequantize_reference(codes, scale, zero, signs, rotated=True)
    step = scale.float()[..., None]
    # half a step, plus what float16 rounding of the scale and zero can add at the far code
    slack = 0.5 * step * 1.01 + zero.float().abs()[..., None] * 1e-3 + 1e-6
    assert bool(((r_hat - r).abs() <= slack).all())


@pytest.mark.parametrize("bits,mean_bound,max_bound", [(4, 0.12, 0.2), (8, 0.0075, 0.012)])
def test_round_trip_error_on_gaussian_vectors(bits: int, mean_bound: float, max_bound: float) -> None:
    x = torch.randn(2048, 4, 128, generator=torch.Generator().manual_seed(1))
    err = _rel_err(_round_trip(x, bits), x)
    assert err.mean().item() < mean_bound and err.max().item() < max_bound
    assert err.mean().item() > mean_bound / 4  # sanity: the bound is not vacuous for this quantizer


@pytest.mark.parametrize("bits", [4, 8])
def test_rotation_cuts_the_error_of_outlier_channels(bits: int) -> None:
    x = torch.randn(2048, 2, 128, generator=torch.Generator().manual_seed(2))
    x[..., :4] *= 20.0  # a few key channels far larger than the rest, as real keys have
    rotated = _rel_err(_round_trip(x, bits), x).mean().item()
    raw = _rel_err(tq.round_trip_without_rotation(x, bits), x).mean().item()
    assert rotated < 0.5 * raw


@pytest.mark.parametrize("bits,bound", [(4, 0.2), (8, 0.02)])
def test_attention_error_over_a_quantized_cache(bits: int, bound: float) -> None:
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(n, 2, 128, generator=g) for n in (32, 1024, 1024))

    def attend(k_: torch.Tensor, v_: torch.Tensor) -> torch.Tensor:
        p = torch.softmax(torch.einsum("qhd,khd->hqk", q, k_) / math.sqrt(128), -1)
        return torch.einsum("hqk,khd->qhd", p, v_)

    exact = attend(k, v)
    approx = attend(_round_trip(k, bits), _round_trip(v, bits))
    assert ((approx - exact).norm() / exact.norm()).item() < bound


def test_bytes_per_token() -> None:
    assert tq.bytes_per_token(8, 128, 4) == 2 * 8 * (64 + 4)
    assert tq.bytes_per_token(8, 128, 8) == 2 * 8 * (128 + 4)
    bf16 = 2 * 2 * 8 * 128
    assert 3.7 < bf16 / tq.bytes_per_token(8, 128, 4) < 3.8
    assert 1.9 < bf16 / tq.bytes_per_token(8, 128, 8) < 2.0
    with pytest.raises(ValueError, match="4- or 8-bit"):
        tq.bytes_per_token(8, 128, 3)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("bits", [4, 8])
def test_allocated_cache_matches_bytes_per_token(layout: str, bits: int) -> None:
    cache = tq.allocate_cache(10, 32, 4, 128, bits, "cpu", layout=layout)
    assert cache.nbytes() == 10 * 32 * tq.bytes_per_token(4, 128, bits)
    assert cache.rotation.shape == (4, 128)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("bits", [4, 8])
def test_write_reference_then_dequantize_round_trips(layout: str, bits: int) -> None:
    cache = tq.allocate_cache(4, 16, 2, 64, bits, "cpu", layout=layout, seed=5)
    g = torch.Generator().manual_seed(4)
    k, v = torch.randn(20, 2, 64, generator=g), torch.randn(20, 2, 64, generator=g)
    slots = torch.tensor([3, 17, 40, 63] + list(range(44, 60)))
    slots[5] = -1  # padding slot: skipped
    tq.write_reference(cache, k, v, slots)
    kd, vd = tq.dequantize(cache)
    flat_k, flat_v = kd.reshape(-1, 2, 64), vd.reshape(-1, 2, 64)
    ok = slots >= 0
    assert (_rel_err(flat_k[slots[ok]], k[ok]).max()) < (0.2 if bits == 4 else 0.012)
    assert (_rel_err(flat_v[slots[ok]], v[ok]).max()) < (0.2 if bits == 4 else 0.012)
    untouched = torch.ones(64, dtype=torch.bool)
    untouched[slots[ok]] = False
    assert bool((flat_k[untouched] == 0).all())


def test_unpack_codes_splits_nibbles_into_halves() -> None:
    packed = torch.tensor([[0x21, 0xF0]], dtype=torch.uint8)  # byte i: dim i low nibble, dim i + D/2 high
    assert tq.unpack_codes(packed, 4, 4)[0].tolist() == [1, 0, 2, 15]


@pytest.mark.parametrize(
    "args,match",
    [
        ((4, 16, 2, 96, 4), "power-of-two"),
        ((4, 16, 2, 128, 3), "4- or 8-bit"),
        ((4, 24, 2, 128, 4), "page size"),
    ],
)
def test_allocate_refuses_unsupported_shapes(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tq.allocate_cache(*args, device="cpu")


def test_kernels_refuse_cpu_tensors_without_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    cache = tq.allocate_cache(2, 16, 1, 64, 4, "cpu")
    x = torch.zeros(1, 1, 64)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        tq.write(cache, x, x, torch.zeros(1, dtype=torch.int64))
