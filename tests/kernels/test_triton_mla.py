"""hwtune's Triton MLA decode kernel (hwtune/kernels/triton_mla.py) against the float32 MLA reference.

The reference is the probe's own (hwtune.probes.attention.mla): multi-head attention over the latent up-projected
by random per-head W_UK / W_UV, so the kernel's absorbed computation is checked against the unabsorbed one; the
latent output is compared after its W_UV projection, and the LSE directly. Outputs are NaN-filled first (every
element must be written) and rows past the batch's tokens (CUDA-graph padding) must stay untouched.

On the CPU the cases run in Triton's interpreter, in a subprocess with TRITON_INTERPRET=1 set before triton is
imported (``python -m tests.kernels.test_triton_mla``; the bf16 ``tl.dot`` fix of tests/kernels/interp_runner.py is
applied there). The same cases run at real sizes on a GPU (marked ``gpu``), with CUDA-graph replays.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

pytest.importorskip(
    "triton", reason="triton is not installed (a CPU install leaves it out): `pip install triton` runs these"
)

ROOT = Path(__file__).resolve().parents[2]
Checks = dict[str, tuple[float, float]]


@dataclass(frozen=True)
class Case:
    """One kernel call: the MLA problem's shape, the kernel's options, and what the call may get wrong."""

    heads: int = 16
    lora: int = 64
    rope: int = 16
    dtype: str = "bfloat16"
    kv: str = "auto"
    page: int = 16
    ctx: tuple[int, ...] = (70, 5, 33)
    query_len: int = 1
    config: tuple | None = None  # MlaConfig fields (block_h, block_t, block_n, splits, warps, stages[, half_p., tma])
    causal: bool = True
    pad_tokens: int = 0
    scale_factor: float = 1.0  # != 1: call the kernel with a wrong softmax scale (the checks must fail)
    nan_tail: bool = False  # NaN in each request's last page past its context: must never be weighed
    int64_table: bool = False  # an int64 block table (the probe's and vLLM's are int32)


CASES: dict[str, Case] = {
    "decode_bf16_auto": Case(),
    "decode_fp16_page1": Case(dtype="float16", page=1),
    "decode_page48_splits": Case(page=48, ctx=(130, 7, 100), config=(16, 1, 16, 3, 4, 2)),
    "decode_page64_many_splits": Case(heads=32, page=64, ctx=(300, 260), config=(16, 1, 32, 7, 4, 2)),
    "half_partials_bf16": Case(page=48, ctx=(130, 7, 100), config=(16, 1, 16, 3, 4, 2, True)),
    "half_partials_fp16_spec_lse": Case(dtype="float16", query_len=2, config=(16, 2, 16, 5, 4, 2, True)),
    "half_partials_fp8_latent": Case(kv="fp8_e4m3", config=(16, 1, 16, 3, 4, 2, True)),
    "spec_decode_4_tokens": Case(query_len=4, config=(16, 4, 16, 4, 4, 2)),
    "spec_decode_heads_24": Case(heads=24, query_len=3, config=(32, 2, 16, 2, 4, 2)),
    "prefill_chunk_20_on_40": Case(query_len=20, ctx=(40, 20), config=(16, 2, 16, 2, 4, 2)),
    "fp8_latent_bf16_q": Case(kv="fp8_e4m3", config=(16, 1, 16, 3, 4, 2)),
    "fp8_latent_fp16_q_spec": Case(kv="fp8_e4m3", dtype="float16", query_len=2),
    "deepseek_widths_128_heads": Case(heads=128, lora=512, rope=64, dtype="float16", ctx=(40, 17)),
    "non_causal_share": Case(query_len=3, causal=False, config=(16, 4, 16, 2, 4, 2)),
    "graph_padding_rows": Case(pad_tokens=5, config=(16, 1, 16, 2, 4, 2)),
    "gather_nan_tail": Case(ctx=(70, 5, 33), config=(16, 1, 32, 2, 4, 2), nan_tail=True),
    "tma_page16_nan_tail": Case(ctx=(70, 5, 33), config=(16, 1, 16, 3, 4, 2, False, True), nan_tail=True),
    "tma_int64_block_table": Case(config=(16, 1, 16, 2, 4, 2, False, True), nan_tail=True, int64_table=True),
    "tma_page64_spec_lse": Case(
        page=64, query_len=2, ctx=(130, 7, 100), config=(16, 2, 32, 2, 4, 2, False, True), nan_tail=True
    ),
    "wrong_scale_is_caught": Case(scale_factor=math.sqrt(192 / 576)),  # the latent width's 1/sqrt(576)
}
#: Cases whose checks must fail: they show the checks can catch a broken kernel call.
MUST_FAIL = {"wrong_scale_is_caught"}
#: Cases the GPU runs at DeepSeek-V3 sizes (heads 16 / 128, 512 + 64, long contexts).
GPU_CASES = {
    "tp8_decode": Case(heads=16, lora=512, rope=64, ctx=(4096, 1000, 33, 2500), page=64),
    "tp1_decode_page1": Case(heads=128, lora=512, rope=64, ctx=(3000, 77), page=1),
    "tp1_spec_decode": Case(heads=128, lora=512, rope=64, ctx=(2048, 513), page=16, query_len=3),
    "tp8_fp8": Case(heads=16, lora=512, rope=64, ctx=(8192, 100), page=32, kv="fp8_e4m3"),
    "tp1_long_splits": Case(heads=128, lora=512, rope=64, ctx=(32768,), page=64),
    "tp8_tma_page16": Case(heads=16, lora=512, rope=64, ctx=(3000, 700, 33), config=(16, 1, 16, 8, 4, 3, False, True)),
    **{  # 64-token pages, NaN past each context: a 64-position TMA tile, and the 32-position ones the tuned space adds
        f"tp8_tma_page64_n{n}_st{st}": Case(
            heads=16,
            lora=512,
            rope=64,
            ctx=(12000, 77, 3000),
            page=64,
            config=(16, 1, n, s, 4, st, False, True),
            nan_tail=True,
        )  # fmt: skip
        for n, s, st in ((64, 16, 2), (32, 33, 3), (32, 8, 6), (32, 1, 8))
    },
    "tp8_half_partials": Case(
        heads=16, lora=512, rope=64, ctx=(12000, 700, 3000), page=16, config=(16, 1, 32, 16, 4, 2, True)
    ),
}


def _tolerance(case: Case) -> tuple[float, float]:
    """(relative L2 of the projected output, absolute LSE) allowed for the case's dtypes."""
    if case.kv.startswith("fp8"):
        return 5e-2, 3e-2
    return (1.5e-2, 1e-2) if case.dtype == "bfloat16" else (3e-3, 3e-3)


def _problem(case: Case, device: str, seed: int = 0):  # noqa: ANN202 - MlaProblem
    from hwtune.core.types import AttentionSpec, AttentionWorkload
    from hwtune.probes.attention.mla import build_mla_problem

    nope = 128 if case.lora == 512 else 32  # DeepSeek's widths at DeepSeek's latent; small ones for small shapes
    spec = AttentionSpec(
        case.heads, 1, case.lora + case.rope, dtype=case.dtype, kv_cache_dtype=case.kv, block_size=case.page,
        use_mla=True, kv_lora_rank=case.lora, qk_rope_head_dim=case.rope, qk_nope_head_dim=nope, v_head_dim=nope,
        spec_tokens=case.query_len - 1,
    )  # fmt: skip
    lens = tuple(max(c, case.query_len) for c in case.ctx)
    phase = "decode" if case.query_len <= 4 else "prefill"
    w = AttentionWorkload(spec, phase, len(lens), max(lens), query_len=case.query_len, context_lens=lens)
    p = build_mla_problem(w, device, seed=seed)
    return dataclasses.replace(p, causal=case.causal)


def _call(case: Case, p, out: torch.Tensor, lse: torch.Tensor) -> None:  # noqa: ANN001
    from hwtune.kernels.triton_mla import MlaConfig, mla_decode, workspace_size

    tokens = p.num_tokens
    cfg = MlaConfig(*case.config) if case.config else None
    size = workspace_size(
        num_tokens=tokens + case.pad_tokens, num_heads=case.heads, kv_lora_rank=case.lora,
        num_splits=cfg.num_splits if cfg else 1, half_partials=cfg.half_partials if cfg else False,
    )  # fmt: skip
    ws = torch.empty(size, dtype=torch.float32, device=p.q.device) if size else None  # exactly what the config needs
    mla_decode(
        p.q, p.kv_cache, p.block_table, p.seq_lens, p.query_start_loc, max_query_len=p.max_query_len,
        max_seq_len=p.max_seq_len, out=out[: tokens + case.pad_tokens], lse=lse[: tokens + case.pad_tokens],
        softmax_scale=p.softmax_scale * case.scale_factor, kv_lora_rank=case.lora, kv_scale=p.kv_scale,
        causal=case.causal, config=cfg, workspace=ws,
    )  # fmt: skip


def _padded_q(p, pad: int):  # noqa: ANN001, ANN202
    """``p`` with ``pad`` extra query rows past the batch's tokens (what a captured graph's buffers hold)."""
    q = torch.cat([p.q, torch.randn(pad, *p.q.shape[1:], device=p.q.device).to(p.q.dtype)])
    return dataclasses.replace(p, q=q)


def _poison_tails(p) -> None:  # noqa: ANN001
    """NaN in every request's last page past its context (what a reused page can hold)."""
    page = p.kv_cache.shape[1]
    for r, seq in enumerate(p.seq_lens.tolist()):
        last = (seq - 1) // page
        p.kv_cache[int(p.block_table[r, last]), seq - last * page :] = float("nan")


def run_case(case: Case, device: str) -> Checks:
    """Build, call the kernel, compare with the reference; the named checks (value, limit)."""
    from hwtune.probes.attention.correctness import compare_latent
    from hwtune.probes.attention.reference import reference_attention

    p = _problem(case, device)
    if case.pad_tokens:
        p = _padded_q(p, case.pad_tokens)
    if case.nan_tail:
        _poison_tails(p)
    if case.int64_table:
        p = dataclasses.replace(p, block_table=p.block_table.long())
    rows = p.num_tokens + case.pad_tokens
    out = torch.full((rows, case.heads, case.lora), math.nan, dtype=p.q.dtype, device=device)
    lse = torch.full((rows, case.heads), math.nan, device=device)
    _call(case, p, out, lse)
    ref_out, ref_lse = reference_attention(p)
    t = p.num_tokens
    rel, lse_tol = _tolerance(case)
    v = compare_latent(out[:t], ref_out, project=p.project, rel_tol=rel, lse=lse[:t], ref_lse=ref_lse, lse_tol=lse_tol)
    checks: Checks = {
        "unwritten": (v.figures["unwritten"], 0),
        "rel_l2": (v.figures["rel_l2"], rel),
        "max_row_rel": (v.figures["max_row_rel"], 4 * rel),
        "lse_max_abs": (v.figures.get("lse_max_abs", math.inf), lse_tol),
    }
    if case.pad_tokens:
        checks["padding_rows_written"] = (float((~torch.isnan(out[t:].float())).sum()), 0)
    return checks


def run_dcp_merge(device: str) -> Checks:
    """The whole KV against the LSE-merge of its two page-aligned halves (DCP), speculative decode included."""
    from hwtune.probes.attention.correctness import compare_latent
    from hwtune.probes.attention.problem import split_halves
    from hwtune.probes.attention.reference import merge_by_lse, reference_attention

    case = Case(query_len=2, ctx=(70, 40, 100), config=(16, 2, 16, 2, 4, 2))
    p = _problem(case, device)
    parts = []
    for half in split_halves(p):
        out = torch.full((p.num_tokens, case.heads, case.lora), math.nan, dtype=p.q.dtype, device=device)
        lse = torch.full((p.num_tokens, case.heads), math.nan, device=device)
        _call(dataclasses.replace(case, causal=half.causal), half, out, lse)
        parts.append((out, lse))
    out, lse = merge_by_lse(*parts[0], *parts[1])
    ref_out, ref_lse = reference_attention(p)
    v = compare_latent(out, ref_out, project=p.project, rel_tol=1.5e-2, lse=lse, ref_lse=ref_lse, lse_tol=1e-2)
    return {"rel_l2": (v.figures["rel_l2"], 1.5e-2), "lse_max_abs": (v.figures["lse_max_abs"], 1e-2)}


def run_all(names: list[str], device: str) -> dict:
    """Every named case (and ``dcp_merge``) as ``{name: {"checks": ...}}`` or ``{name: {"error": traceback}}``."""
    import traceback

    results = {}
    for name in names:
        try:
            checks = run_dcp_merge(device) if name == "dcp_merge" else run_case(CASES[name], device)
            results[name] = {"checks": {k: [float(v), float(lim)] for k, (v, lim) in checks.items()}}
        except Exception:
            results[name] = {"error": traceback.format_exc()}
    return results


def _failed(result: dict) -> dict:
    assert "error" not in result, result.get("error")
    return {k: v for k, (v, limit) in result["checks"].items() if not v <= limit}


@pytest.fixture(scope="module")
def interp_results() -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.kernels.test_triton_mla"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("name", sorted(set(CASES) - MUST_FAIL) + ["dcp_merge"])
def test_mla_kernel_in_interpreter(name: str, interp_results: dict) -> None:
    failed = _failed(interp_results[name])
    assert not failed, f"{name}: checks over their limits {failed} (all: {interp_results[name]['checks']})"


@pytest.mark.parametrize("name", sorted(MUST_FAIL))
def test_the_checks_catch_a_wrong_scale(name: str, interp_results: dict) -> None:
    """1/sqrt(576) (the latent width) instead of 1/sqrt(192) (the model's q.k width) must not pass."""
    failed = _failed(interp_results[name])
    assert "rel_l2" in failed and "lse_max_abs" in failed, interp_results[name]


def test_auto_config_rows_and_splits() -> None:
    """128 heads take two 64-row programs; 16 heads x 4 tokens one; splits fill about two programs per SM but keep
    each split's partial output under half its latent bytes."""
    from hwtune.kernels.triton_mla import default_mla_config

    tp1 = default_mla_config(num_heads=128, max_query_len=1, batch=1, max_seq_len=32768, sms=132)
    assert (tp1.block_h, tp1.block_t, tp1.num_warps) == (64, 1, 8) and 32768 // tp1.num_splits >= 512
    tp8 = default_mla_config(num_heads=16, max_query_len=4, batch=1, max_seq_len=32768, sms=132)
    assert (tp8.block_h, tp8.block_t) == (16, 4) and tp8.num_splits > 1
    big = default_mla_config(num_heads=128, max_query_len=1, batch=128, max_seq_len=8192, sms=132)
    assert big.num_splits == 1


def test_tuned_search_space_starts_with_auto_and_keeps_each_split_a_tile() -> None:
    """The ``tuned`` tactic's space: auto first, no duplicates, auto's rows everywhere, every split at least one KV
    tile, and both a one-split and a more-split config than auto's (where the context allows)."""
    from hwtune.kernels.mla_configs import MAX_SPLITS, default_mla_config, mla_config_space

    for heads, q_len, batch, ctx in ((16, 1, 2, 700), (16, 4, 8, 4096), (128, 1, 64, 8192), (16, 1, 1, 32768)):
        shape = dict(num_heads=heads, max_query_len=q_len, batch=batch, max_seq_len=ctx, sms=132)
        auto, space = default_mla_config(**shape), mla_config_space(**shape)
        assert space[0] == auto and len(set(space)) == len(space) <= 7 * 3 * 3  # splits x tiles x (warps, stages)
        assert {(c.block_h, c.block_t) for c in space} == {(auto.block_h, auto.block_t)}
        assert all(c.num_splits * c.block_n <= max(ctx, c.block_n) for c in space)
        splits = {c.num_splits for c in space}
        assert 1 in splits and (max(splits) > auto.num_splits or auto.num_splits == min(MAX_SPLITS, ctx // 16))
    # one wave of two programs per SM: auto stops at 23 splits (its tokens-per-split floor), the space holds 33 too
    shape = dict(num_heads=16, max_query_len=1, batch=8, max_seq_len=3000, sms=132)
    assert default_mla_config(**shape).num_splits == 23
    assert 33 in {c.num_splits for c in mla_config_space(**shape)}
    assert not any(c.tma for c in mla_config_space(**shape))  # no TMA unless the cache allows it


def test_tuned_space_adds_tma_tiles_only_on_pages_of_32_and_16_rows() -> None:
    from hwtune.kernels.triton_mla import mla_config_space

    shape = dict(num_heads=16, max_query_len=1, batch=8, max_seq_len=3000, sms=132)
    gathers = mla_config_space(**shape)
    tma = [c for c in mla_config_space(**shape, tma_page=64) if c.tma]
    assert {(c.block_n, c.num_splits, c.num_warps, c.num_stages) for c in tma} == {
        (32, 23, 4, 3),
        (32, 33, 4, 3),
        (32, 16, 4, 6),
        (32, 16, 4, 8),
    }  # auto's and the one-wave split count; the deep ones at 16 splits: 128 programs, each on an SM of its own
    space = mla_config_space(**shape, tma_page=64)
    assert space[: len(gathers)] == gathers and len(set(space)) == len(space)

    def deep(**changed: int) -> list[tuple[int, int]]:
        configs = mla_config_space(**dict(shape, **changed), tma_page=64)
        return [(c.num_splits, c.num_stages) for c in configs if c.num_stages >= 6]

    assert deep(batch=128) == [(1, 6), (1, 8)]
    assert deep(batch=200) == []  # more programs than SMs: some would share one
    assert deep(batch=1, max_seq_len=48000) == [(128, 6), (128, 8)]  # at most MAX_SPLITS
    assert deep(batch=1, max_seq_len=700) == [(21, 6), (21, 8)]  # at least one tile a split
    assert not any(c.tma for c in mla_config_space(**shape, tma_page=16))  # a 32-position tile spans two pages
    spec = dict(shape, max_query_len=2)  # 32 rows: not measured with TMA
    assert not any(c.tma for c in mla_config_space(**spec, tma_page=64))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_split_buffers_carve_partials_and_lses_apart_within_the_workspace_size(dtype) -> None:
    from hwtune.kernels.split_kv import split_buffers
    from hwtune.kernels.triton_mla import workspace_size

    for splits, tokens, heads, width in ((2, 1, 16, 512), (3, 5, 3, 7), (7, 3, 24, 1), (16, 1, 1, 3)):
        size = workspace_size(
            num_tokens=tokens, num_heads=heads, kv_lora_rank=width, num_splits=splits,
            half_partials=dtype != torch.float32,
        )  # fmt: skip
        ws = torch.zeros(size + 1)[1:]  # a view with a storage offset
        part_o, part_lse, counters = split_buffers(
            ws, splits=splits, num_tokens=tokens, num_heads=heads, head_size=width, device=ws.device,
            partial_dtype=dtype,
        )  # fmt: skip
        assert part_o.dtype == dtype and part_o.shape == (splits, tokens, heads, width)
        assert part_lse.dtype == torch.float32 and part_lse.shape == (splits, tokens, heads)
        assert counters.dtype == torch.int32 and counters.data_ptr() == ws.data_ptr()  # first, whatever the shape
        part_o.fill_(1.0)
        assert bool((part_lse == 0).all())  # the LSEs do not overlap the partials
        part_lse.fill_(2.0)
        assert bool((part_o == 1).all()) and bool((counters == 0).all())  # nor the counters
        o_end = part_o.data_ptr() + part_o.numel() * part_o.element_size()
        assert part_lse.data_ptr() >= o_end and part_lse.data_ptr() % 4 == 0
        assert part_lse.data_ptr() + part_lse.numel() * 4 <= ws.data_ptr() + ws.numel() * 4
        if dtype != torch.float32 and width > 1:  # a workspace sized for 16-bit partials is too small for float32
            with pytest.raises(ValueError, match="float32 partials"):
                split_buffers(ws, splits=splits, num_tokens=tokens, num_heads=heads, head_size=width, device=ws.device)


def test_half_partials_need_several_splits() -> None:
    from hwtune.kernels.triton_mla import MlaConfig

    with pytest.raises(ValueError, match="num_splits > 1"):
        MlaConfig(16, 1, 16, 1, 4, 2, half_partials=True)


def test_tma_is_refused_where_a_tile_cannot_be_one_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    from hwtune.kernels import _tma, triton_mla

    q = torch.zeros(2, 16, 576, dtype=torch.bfloat16)
    cache = torch.zeros(4, 16, 576, dtype=torch.bfloat16)
    monkeypatch.setattr(_tma, "interpreting", lambda: False)
    assert "CUDA device" in triton_mla.tma_unsupported(q, cache, 16)
    monkeypatch.setattr(_tma, "interpreting", lambda: True)
    assert triton_mla.tma_unsupported(q, cache, 16) is None
    assert "inside one page" in triton_mla.tma_unsupported(q, cache, 32)
    assert "query's dtype" in triton_mla.tma_unsupported(q, cache.to(torch.float8_e4m3fn), 16)
    assert "back to back" in triton_mla.tma_unsupported(q, cache[:, :8], 8)  # pages of 8 rows, 16 apart
    assert triton_mla.MlaConfig(16, 1, 16, 2, 4, 2, tma=True).name() == "h16-t1-n16-s2-w4-st2-tma"
    # what the tuned candidate hands mla_config_space: the page where its 32-position TMA tiles fit, else 0
    assert triton_mla.tma_page(q, torch.zeros(4, 64, 576, dtype=torch.bfloat16)) == 64
    assert triton_mla.tma_page(q, cache) == 0  # 16-token pages
    assert triton_mla.tma_page(q, torch.zeros(4, 64, 576, dtype=torch.bfloat16).to(torch.float8_e4m3fn)) == 0


def test_bad_arguments_are_refused_with_the_contract() -> None:
    from hwtune.kernels.triton_mla import MlaConfig, _check_args

    q = torch.zeros(2, 4, 576, dtype=torch.bfloat16)
    cache = torch.zeros(3, 16, 576, dtype=torch.float16)
    out = torch.zeros(2, 4, 512, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="must have the query's dtype"):
        _check_args(q, cache, out, None, 512)
    with pytest.raises(ValueError, match="out must be"):
        _check_args(q, cache.bfloat16(), out[..., :256], None, 512)
    with pytest.raises(ValueError, match="rows"):
        MlaConfig(4, 2, 32, 1, 4, 2)


# --- GPU: real sizes and CUDA graphs ------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_CASES))
def test_mla_kernel_on_gpu(name: str) -> None:
    checks = run_case(GPU_CASES[name], "cuda")
    failed = {k: v for k, (v, limit) in checks.items() if not v <= limit}
    assert not failed, f"{name}: {failed} (all: {checks})"


@pytest.mark.gpu
def test_mla_kernel_graph_replay_follows_new_metadata() -> None:
    """Capture one call, rewrite the batch (lengths, pages, queries) in place, replay: the replay must match the
    reference of the new batch."""
    from hwtune.probes.attention.correctness import compare_latent
    from hwtune.probes.attention.mla import build_mla_problem
    from hwtune.probes.attention.problem import second_batch_lengths
    from hwtune.probes.attention.reference import reference_attention

    case = GPU_CASES["tp8_decode"]
    p = _problem(case, "cuda")
    out = torch.empty(p.num_tokens, case.heads, case.lora, dtype=p.q.dtype, device="cuda")
    lse = torch.empty(p.num_tokens, case.heads, device="cuda")
    _call(case, p, out, lse)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _call(case, p, out, lse)
    b = build_mla_problem(p.workload, "cuda", seed=7, like=p, lengths=second_batch_lengths(p.workload, 7))
    out.fill_(math.nan)
    graph.replay()
    torch.cuda.synchronize()
    ref_out, ref_lse = reference_attention(b)
    v = compare_latent(out, ref_out, project=b.project, rel_tol=1.5e-2, lse=lse, ref_lse=ref_lse, lse_tol=1e-2)
    assert v.ok, v.problems


def _main() -> int:
    import tests.kernels.interp_runner  # noqa: F401 - sets TRITON_INTERPRET and fixes the interpreter's bf16 dots

    torch.set_num_threads(1)
    json.dump(run_all(sorted(CASES) + ["dcp_merge"], "cpu"), sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
