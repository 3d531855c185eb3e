"""The TMA path's host side (hwtune/kernels/_tma.py): the cache seen as a matrix, the reasons it
cannot be used, and when a launch takes it. CPU only; the kernels themselves run in the interpreter and GPU
grids (cases ``*_tma_*``)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip(
    "triton",
    reason="triton is not installed (a CPU install leaves it out): `pip install triton` runs these",
)

from hwtune.kernels._tma import KvMatrix, choose_kv_loads, kv_matrix, tma_unsupported

BLOCKS, PAGE, HEADS, D = 5, 16, 4, 64


def _matrix(view: torch.Tensor, layout: str) -> KvMatrix | str:
    if layout == "NHD":
        b, t, h = view.stride(0), view.stride(1), view.stride(2)
    else:
        b, t, h = view.stride(0), view.stride(2), view.stride(1)
    return kv_matrix(view, stride_b=b, stride_t=t, stride_h=h, page_size=PAGE, num_kv_heads=HEADS)


def _element(m: KvMatrix, view: torch.Tensor, block: int, token: int, head: int) -> torch.Tensor:
    """Element (row, column) of the matrix view, read through the descriptor's own arithmetic."""
    row = block * m.rows_per_block + head * m.rows_per_head + token
    flat = torch.as_strided(view, (m.rows, m.cols), (m.row_stride, 1))
    return flat[row, head * m.cols_per_head : head * m.cols_per_head + D]


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("interleaved", [True, False])
def test_matrix_rows_are_the_cache_tokens(layout: str, interleaved: bool) -> None:
    inner = (PAGE, HEADS) if layout == "NHD" else (HEADS, PAGE)
    if interleaved:  # FlashInfer-style [blocks, 2, ...]: K and V views with a doubled block stride
        kv = torch.randn(BLOCKS, 2, *inner, D)
        k, v = kv[:, 0], kv[:, 1]
    else:
        k, v = torch.randn(BLOCKS, *inner, D), torch.randn(BLOCKS, *inner, D)
    for view in (k, v):
        m = _matrix(view, layout)
        assert isinstance(m, KvMatrix), m
        assert (m.rows_per_head == 0) == (layout == "NHD") and (m.cols_per_head == 0) == (layout == "HND")
        for block, token, head in ((0, 0, 0), (BLOCKS - 1, PAGE - 1, HEADS - 1), (2, 7, 1)):
            expect = view[block, token, head] if layout == "NHD" else view[block, head, token]
            assert torch.equal(_element(m, view, block, token, head), expect)
        # the extent ends at the cache's last token: a tile never reads past the tensor
        last = (BLOCKS - 1) * m.rows_per_block + (HEADS - 1) * m.rows_per_head + PAGE
        assert m.rows == last
        end = view.storage_offset() + (m.rows - 1) * m.row_stride + m.cols
        assert end <= view.untyped_storage().nbytes() // view.element_size()


def test_strides_tma_cannot_express_are_reasons() -> None:
    padded = torch.randn(BLOCKS, PAGE, HEADS, D + 4)[..., :D]  # heads 68 apart, still inside a token's row
    assert isinstance(_matrix(padded, "NHD"), KvMatrix)
    odd = torch.randn(BLOCKS * PAGE * HEADS * D + 8)[1 : 1 + BLOCKS * PAGE * HEADS * D].view(BLOCKS, PAGE, HEADS, D)
    assert "16 bytes" in _matrix(odd, "NHD")  # base not 16-byte aligned
    skew = torch.as_strided(torch.randn(BLOCKS * 2000), (BLOCKS, PAGE, HEADS, D), (1000, HEADS * D, D, 1))
    assert "multiple of the token stride" in _matrix(skew, "NHD")
    overlap = torch.as_strided(torch.randn(BLOCKS * 2000), (BLOCKS, PAGE, HEADS, D), (1024, 32, 8, 1))
    assert "rows would overlap" in _matrix(overlap, "NHD")


def test_unsupported_tensors_say_why() -> None:
    q = torch.randn(3, 8, D, dtype=torch.bfloat16)
    k = torch.randn(BLOCKS, PAGE, HEADS, D, dtype=torch.bfloat16)
    m = _matrix(k, "NHD")
    assert "CUDA device" in tma_unsupported(q, k, k, m, m)


def test_unsupported_dtype_head_and_strides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # skip the device check: the rest is host arithmetic
    q = torch.randn(3, 8, D, dtype=torch.bfloat16)
    k = torch.randn(BLOCKS, PAGE, HEADS, D, dtype=torch.bfloat16)
    m = _matrix(k, "NHD")
    assert tma_unsupported(q, k, k, m, m) is None
    fp8 = k.to(torch.float8_e4m3fn)
    assert "float16 or bfloat16" in tma_unsupported(q, fp8, fp8, m, m)
    assert "match the queries" in tma_unsupported(q.half(), k, k, m, m)
    q96, k96 = torch.randn(3, 8, 96, dtype=torch.bfloat16), torch.randn(BLOCKS, PAGE, HEADS, 96, dtype=torch.bfloat16)
    assert "power-of-two head size" in tma_unsupported(q96, k96, k96, m, m)
    assert tma_unsupported(q, k, k, m, "the cache's base address ...").startswith("V cache: ")
    other = KvMatrix(m.rows, m.cols, m.row_stride, m.rows_per_block * 2, 0, m.cols_per_head)
    assert "same strides" in tma_unsupported(q, k, k, m, other)


def test_when_a_launch_takes_tma() -> None:
    ok = dict(unsupported=None, page_size=128, block_n=128)
    assert choose_kv_loads("auto", **ok, prefill_style=True)
    assert not choose_kv_loads("auto", **ok, prefill_style=False)  # decode stays on the measured gathers
    assert choose_kv_loads("tma", **ok, prefill_style=False)
    assert not choose_kv_loads("gather", **ok, prefill_style=True)
    assert not choose_kv_loads("auto", unsupported=None, page_size=16, block_n=128, prefill_style=True)
    with pytest.raises(ValueError, match="must lie inside one page.*block_n dividing 16"):
        choose_kv_loads("tma", unsupported=None, page_size=16, block_n=128, prefill_style=True)
    with pytest.raises(ValueError, match="not possible here: TMA loads need SM 9.0"):
        choose_kv_loads(
            "tma", unsupported="TMA loads need SM 9.0 or later", page_size=128, block_n=64, prefill_style=True
        )
    with pytest.raises(ValueError, match="kv_loads must be one of"):
        choose_kv_loads("ldg", **ok, prefill_style=True)
