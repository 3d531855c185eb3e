"""The split-KV merge kernel (``split_kv.merge_splits``) alone, in Triton's interpreter, against a torch
logsumexp merge: more splits than one chunk of the kernel's loop (so the running maximum is rescaled between
chunks), LSEs whose exponentials overflow float32 unless the maximum is subtracted, head sizes that are and are not
a multiple of the kernel's head slice, several (token, head) rows a program (``_merge_rows_kernel``, a last block
part padding), 16-bit partials, splits that saw no KV (LSE -inf; a whole first chunk of
them), a row no split saw (output 0, LSE -inf) and padding tokens past the batch left untouched. Besides: the merge
kernel's launch geometry, where it is a programmatic dependent of the attention kernel (``merges_as_dependent``), and
both kernels compiled for SM 9.0 (no GPU needed) reading nothing the attention kernel writes before they wait."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hwtune.kernels.split_kv import (
    MERGE_MANY_ROWS_PER_SM,
    MERGE_MIN_D,
    MERGE_ROW_STEP,
    merge_block_d,
    merge_rows_per_program,
)

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
import torch
import hwtune.kernels.split_kv as split_kv

def case(splits, tokens, heads, head, dtype, with_lse, seed, sms, rows=None):
    split_kv.num_sms = lambda device: sms  # the interpreter's 4 SMs would never slice the heads
    g = torch.Generator().manual_seed(seed)
    part_o = torch.randn(splits, tokens, heads, head, generator=g).to(dtype)
    part_lse = torch.randn(splits, tokens, heads, generator=g) * 30 + 100  # exp(lse) overflows float32 unrescaled
    part_lse[::3, 0, 0] = float("-inf")  # every third split saw no KV for (token 0, head 0)
    part_lse[: splits // 2 + 1, 2 % tokens, 0] = float("-inf")  # (token 2, head 0): the first chunk(s) saw no KV
    part_lse[:, 1, heads - 1] = float("-inf")  # no split saw any KV for (token 1, last head)
    part_o[:, 1, heads - 1] = float("nan")  # and its partials are garbage the merge must not read
    batch_tokens = tokens - 1  # the last token is CUDA-graph padding
    qsl = torch.tensor([0, 1, batch_tokens], dtype=torch.int32)
    out = torch.full((tokens, heads, head), 7.0, dtype=dtype)
    lse = torch.full((tokens, heads), 7.0) if with_lse else None
    launched, real = [], split_kv._merge_rows_kernel

    class Counting:  # which merge kernel ran: the rows kernel's launches are counted
        def __getitem__(self, grid):
            launched.append(grid)
            return real[grid]

    split_kv._merge_rows_kernel = Counting()
    try:
        split_kv.merge_splits(part_o, part_lse, out, lse, qsl, 2, rows_per_program=rows)
    finally:
        split_kv._merge_rows_kernel = real
    w = torch.softmax(part_lse, 0).nan_to_num(0.0)
    ref = (w[..., None] * part_o.float().nan_to_num(0.0)).sum(0)
    ref_lse = torch.logsumexp(part_lse, 0)
    real = slice(0, batch_tokens)
    err = float((out[real].float() - ref[real]).abs().max())
    lse_err = float((lse[real] - ref_lse[real]).nan_to_num(0.0).abs().max()) if with_lse else 0.0
    return {
        "err": err, "lse_err": lse_err,
        "padding_untouched": bool((out[batch_tokens:] == 7.0).all())
        and (not with_lse or bool((lse[batch_tokens:] == 7.0).all())),
        "empty_row_zero": bool((out[1, heads - 1] == 0).all()),
        "empty_lse_inf": (not with_lse) or bool(lse[1, heads - 1] == float("-inf")),
        "rows_kernel": bool(launched),
    }

print(json.dumps({
    "f32_70_splits_d512": case(70, 4, 3, 512, torch.float32, True, 0, 4),
    "f32_70_splits_d512_sliced": case(70, 4, 3, 512, torch.float32, True, 0, 1000),
    "bf16_5_splits_d96_sliced": case(5, 3, 2, 96, torch.bfloat16, True, 1, 1000),
    "f32_33_splits_d200_no_lse_sliced": case(33, 3, 2, 200, torch.float32, False, 2, 1000),
    "f32_9_splits_d128_rows4": case(9, 5, 3, 128, torch.float32, True, 3, 4, rows=4),  # 15 rows: a partial last block
    "bf16_3_splits_d96_rows2_no_lse": case(3, 4, 3, 96, torch.bfloat16, False, 4, 4, rows=2),
    "f32_5_splits_d128_rows_by_rule": case(5, 9, 4, 128, torch.float32, True, 5, 1),  # 36 rows, 1 SM: 4 a program
}))
"""


@pytest.fixture(scope="module")
def results() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("case", "tol", "rows_kernel"),
    [
        ("f32_70_splits_d512", 1e-5, False),
        ("f32_70_splits_d512_sliced", 1e-5, False),
        ("bf16_5_splits_d96_sliced", 2e-2, False),
        ("f32_33_splits_d200_no_lse_sliced", 1e-5, False),
        ("f32_9_splits_d128_rows4", 1e-5, True),
        ("bf16_3_splits_d96_rows2_no_lse", 2e-2, True),
        ("f32_5_splits_d128_rows_by_rule", 1e-5, True),
    ],
)
def test_merge_matches_a_logsumexp_merge(case: str, tol: float, rows_kernel: bool, results: dict) -> None:
    r = results[case]
    assert r["err"] <= tol, r
    assert r["lse_err"] <= 1e-4, r
    assert r["padding_untouched"] and r["empty_row_zero"] and r["empty_lse_inf"], r
    assert r["rows_kernel"] == rows_kernel, r  # the kernel under test ran (several rows a program, or one)


def test_heads_are_sliced_only_while_the_token_head_programs_leave_sms_idle() -> None:
    assert merge_block_d(num_tokens=32, num_heads=16, head_size=512, sms=132) == 512  # 512 programs: whole heads
    assert merge_block_d(num_tokens=8, num_heads=16, head_size=512, sms=132) == 256  # 128 programs: two slices
    assert merge_block_d(num_tokens=1, num_heads=16, head_size=512, sms=132) == MERGE_MIN_D  # 8 slices, the floor
    assert merge_block_d(num_tokens=1, num_heads=32, head_size=96, sms=132) == 64  # padded to 128, two slices
    assert merge_block_d(num_tokens=1, num_heads=8, head_size=64, sms=132) == 64  # never below the floor


def test_merge_programs_take_several_rows_only_where_rows_are_plentiful() -> None:
    sms, per_sm = 132, MERGE_MANY_ROWS_PER_SM
    assert merge_rows_per_program(num_tokens=96, num_heads=8, head_size=128, sms=sms) == 1  # 768 rows: too few
    assert merge_rows_per_program(num_tokens=per_sm * sms, num_heads=1, head_size=128, sms=sms) == MERGE_ROW_STEP // 128
    assert merge_rows_per_program(num_tokens=96, num_heads=32, head_size=128, sms=sms) == 4  # a chunk's 3072 rows
    assert merge_rows_per_program(num_tokens=96, num_heads=32, head_size=96, sms=sms) == 4  # padded to 128
    assert merge_rows_per_program(num_tokens=384, num_heads=32, head_size=256, sms=sms) == 2
    assert merge_rows_per_program(num_tokens=128, num_heads=16, head_size=512, sms=sms) == 1  # MLA: the chunked kernel


def test_the_merge_is_a_programmatic_dependent_only_on_hopper_or_later_outside_the_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from hwtune.kernels import split_kv

    monkeypatch.setattr(split_kv, "_TRITON_HAS_PDL", True)
    monkeypatch.setattr(split_kv, "_major", lambda index: 9)  # an H100 / H200
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    cuda = torch.device("cuda", 0)
    dependent = split_kv.merges_as_dependent
    assert dependent(cuda, 1) and dependent(cuda, 4)  # decode, speculative decode
    assert not dependent(cuda, 96)  # a prefill-style launch: measured slower at one of two shapes
    assert not dependent(torch.device("cpu"), 1)
    with monkeypatch.context() as m:
        m.setenv("TRITON_INTERPRET", "1")  # the interpreter has no grid-dependency control
        assert not dependent(cuda, 1)
    with monkeypatch.context() as m:
        m.setattr(split_kv, "PDL_MERGE", False)
        assert not dependent(cuda, 1)
    with monkeypatch.context() as m:
        m.setattr(split_kv, "_TRITON_HAS_PDL", False)  # a Triton without grid-dependency control
        assert not dependent(cuda, 1)
    with monkeypatch.context() as m:
        m.setattr(torch.version, "hip", "6.4")  # ROCm reports its GPUs as cuda devices
        assert not dependent(cuda, 1)
    monkeypatch.setattr(split_kv, "_major", lambda index: 8)  # Ampere: no PDL
    assert not dependent(cuda, 1)


def _merge_ptx(kernel, **constexprs: object) -> str:  # noqa: ANN001
    """PTX of one merge kernel compiled for SM 9.0 on this machine (no GPU needed)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    ptrs = {"part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "out_ptr": "*bf16", "lse_ptr": "*fp32", "qsl_ptr": "*i32"}
    names = kernel.arg_names
    signature = {n: ptrs.get(n, "constexpr" if n in constexprs else "i32") for n in names}
    values = {(i,): constexprs[n] for i, n in enumerate(names) if n in constexprs}
    compiled = triton.compile(
        ASTSource(fn=kernel, signature=signature, constexprs=values), target=GPUTarget("cuda", 90, 32)
    )
    return compiled.asm["ptx"]


@pytest.mark.parametrize("rows_kernel", [False, True])
def test_the_dependent_merge_reads_only_the_query_counts_before_it_waits(rows_kernel: bool) -> None:
    """Compiled for SM 9.0: with ``USE_PDL`` every global load but the query count (``qsl[batch]``, which the attention
    kernel does not write) comes after ``griddepcontrol.wait``; without it there is no grid-dependency control."""
    pytest.importorskip("triton.backends.compiler")
    from hwtune.kernels import split_kv

    if rows_kernel:
        kernel, sizes = split_kv._merge_rows_kernel, dict(HEAD_D=128, BLOCK_D=128, BLOCK_R=4, WRITE_LSE=True)
    else:
        kernel, sizes = split_kv._merge_kernel, dict(HEAD_D=512, BLOCK_D=256, CHUNK=8, WRITE_LSE=True)
    ptx = _merge_ptx(kernel, **sizes, USE_PDL=True)
    wait = ptx.index("griddepcontrol.wait")
    assert ptx[:wait].count("ld.global") == 1 and ptx[wait:].count("ld.global") > 1
    assert "griddepcontrol" not in _merge_ptx(kernel, **sizes, USE_PDL=False)
