"""hwtune's Triton kernels on a CUDA GPU: the declared grid at real sizes, every tactic of the search
space, CUDA-graph capture with metadata changed between replays. Skipped without CUDA."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

from tests.kernels.cases import Problem, build, compare, run_triton
from tests.kernels.grid import GPU_CASES
from tests.kernels.reference import paged_attention_ref

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _compiled() -> None:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("TRITON_INTERPRET is set: GPU tests must run compiled kernels")


@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_grid_case_on_gpu(case: str) -> None:
    checks = GPU_CASES[case]("cuda")
    failed = {k: v for k, (v, limit) in checks.items() if not v <= limit}
    assert not failed, f"{case}: {failed} (all: {checks})"


def _space_problem(phase: str, head_size: int) -> Problem:
    if phase == "decode":
        return Problem(
            (1,) * 8, (17, 4000, 8192, 100, 1, 2049, 300, 5000), num_heads=32, num_kv_heads=8, head_size=head_size
        )
    return Problem((1024, 3, 700), (3000, 3, 700), num_heads=32, num_kv_heads=8, head_size=head_size)


def _assert_space_correct(phase: str, p: Problem, *, refined: bool = False) -> None:
    """Every config of the space is correct on this GPU (with ``refined``, also each one's second-round split counts,
    ``configs.prefill_split_refinements``)."""
    from hwtune.kernels.configs import prefill_split_refinements
    from hwtune.kernels.triton_attention import config_space

    t = build(p, "cuda")
    ref = paged_attention_ref(
        t["q"], t["kv"][:, 0], t["kv"][:, 1], t["block_table"], t["seq_lens"], t["qsl"], softmax_scale=p.head_size**-0.5
    )
    shape = dict(
        batch=len(p.q_lens),
        max_query_len=max(p.q_lens),
        max_seq_len=max(p.seq_lens),
        gqa_group=p.num_heads // p.num_kv_heads,
        num_sms=torch.cuda.get_device_properties(0).multi_processor_count,
        num_kv_heads=p.num_kv_heads,
    )
    space = config_space(phase=phase, head_size=p.head_size, **shape)
    if refined:
        space = list(dict.fromkeys(space + [more for cfg in space for more in prefill_split_refinements(cfg, **shape)]))
    failures = {}
    for cfg in space:
        out, lse = run_triton(replace(p, config=cfg.__dict__), t)
        checks = compare(p, out, lse, *ref)
        bad = {k: v for k, (v, limit) in checks.items() if not v <= limit}
        if bad:
            failures[cfg.name()] = bad
    assert not failures, failures


@pytest.mark.slow  # compiles every config (~30 per shape): several minutes
@pytest.mark.parametrize("head_size", [64, 96, 128, 256])
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_every_config_in_the_search_space_is_correct(phase: str, head_size: int) -> None:
    """The tuner may pick any config of config_space: each must compile (shared memory, registers) and be
    correct on this GPU."""
    _assert_space_correct(phase, _space_problem(phase, head_size))


@pytest.mark.slow
def test_every_config_of_a_short_chunk_on_a_long_prefix_is_correct() -> None:
    """A 96-token chunk on 6000 cached tokens: the space adds auto's config with more KV splits (its query tiles
    fill few SMs), and the search's second round any config with other split counts; each must be correct, the split
    prefill's merge (several rows a program: ``merge_rows_per_program``) included."""
    p = Problem((96,), (6096,), num_heads=32, num_kv_heads=8, head_size=128)
    _assert_space_correct("prefill", p, refined=True)


@pytest.mark.slow
@pytest.mark.parametrize(("q_lens", "seq_lens"), [((96,), (96,)), ((96, 33), (1596, 700))])
def test_every_config_of_a_short_chunk_with_one_kv_head_is_correct(q_lens: tuple, seq_lens: tuple) -> None:
    """8 query heads on one KV head (Qwen3-30B-A3B at TP 4): a short chunk's space holds 16- and 32-row query tiles
    (2 and 4 tokens a tile); each config must be correct from an empty prefix (96 tokens: no split has two KV tiles),
    and on a cached prefix beside a second request also every tile at the split count covering the SMs and each
    second-round split count."""
    p = Problem(q_lens, seq_lens, num_heads=8, num_kv_heads=1, head_size=128)
    _assert_space_correct("prefill", p, refined=True)


@pytest.mark.slow
@pytest.mark.parametrize("head_size", [64, 128, 256])
def test_every_prefill_config_is_correct_with_tma_loads(head_size: int) -> None:
    """With 128-token pages every prefill tile lies inside a page, so on Hopper or later the tuner's configs
    all run on the TMA path (forced here), with NaN in the cache past each context."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA loads need SM 9.0 or later")
    p = replace(_space_problem("prefill", head_size), page_size=128, poison_tail=True, kv_loads="tma")
    _assert_space_correct("prefill", p)


@pytest.mark.parametrize(("kind", "splits"), [("triton", 8), ("triton", 3), ("turboquant", 8)])
def test_cuda_graph_capture_follows_new_metadata(kind: str, splits: int) -> None:
    """Capture once with a preallocated workspace; rewrite seq_lens / block_table in place; replay: the
    output must follow the new metadata (no host sync, no stale state in the launch path). Three splits merge in
    the kernel (``merges_in_kernel``): its arrival counters must come back to zero after every replay."""
    from hwtune.kernels import turboquant as tq
    from hwtune.kernels.configs import MERGE_COUNTER_WORDS, workspace_size
    from hwtune.kernels.triton_attention import TritonAttnConfig, paged_attention
    from tests.kernels.cases import tq_cache_from

    p = Problem((1,) * 8, (4000, 17, 8192, 100, 2000, 5, 640, 3333), num_heads=32, num_kv_heads=8, head_size=128)
    t = build(p, "cuda")
    cfg = TritonAttnConfig(block_n=64, num_splits=splits, num_warps=4, num_stages=3)
    ws = torch.zeros(workspace_size(num_tokens=8, num_heads=32, head_size=128, num_splits=splits), device="cuda")
    out = torch.empty_like(t["q"])
    lse = torch.empty(8, 32, device="cuda")
    cache = tq_cache_from(p, t, 4)[0] if kind == "turboquant" else None

    def launch() -> None:
        common = dict(
            max_query_len=1, max_seq_len=8192, out=out, lse=lse, softmax_scale=128**-0.5, config=cfg, workspace=ws
        )
        if cache is None:
            paged_attention(t["q"], t["kv"][:, 0], t["kv"][:, 1], t["block_table"], t["seq_lens"], t["qsl"], **common)
        else:
            tq.paged_attention(t["q"], cache, t["block_table"], t["seq_lens"], t["qsl"], **common)

    launch()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    for step in range(2):
        new_lens = torch.tensor([(s * (step + 3)) % 8192 + 1 for s in p.seq_lens], dtype=torch.int32)
        t["seq_lens"].copy_(new_lens)
        t["block_table"].copy_(t["block_table"].roll(1, dims=0))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        if cache is None:
            k, v = t["kv"][:, 0], t["kv"][:, 1]
        else:
            k, v = tq.dequantize(cache)
        ref = paged_attention_ref(t["q"], k, v, t["block_table"], t["seq_lens"], t["qsl"], softmax_scale=128**-0.5)
        checks = compare(p, out, lse, *ref, lse_limit=3e-3)
        checks["counters_left_nonzero"] = (float((ws[:MERGE_COUNTER_WORDS].view(torch.int32) != 0).sum()), 0.0)
        failed = {k_: v_ for k_, (v_, limit) in checks.items() if not v_ <= limit}
        assert not failed, f"replay {step}: {failed}"


def _compiled_variants(kernel) -> int:  # noqa: ANN001 - a Triton JITFunction
    return len(kernel.device_caches[torch.cuda.current_device()][0])


def test_one_config_compiles_once_for_every_batch_and_context() -> None:
    """Workload integers (batch, split count, block-table width) are not specialised on: one config at batch 1, 5
    and 16 and at block tables 32 to 47 pages wide runs one compiled kernel (the tuner's per-workload config search
    would otherwise recompile its whole space for each new combination); the merge compiles once per head-slice width
    (``merge_block_d``: whole heads once the (token, head) programs fill the SMs)."""
    from hwtune.kernels import _common, split_kv, triton_attention

    config = {"block_n": 64, "num_splits": 3}
    before, widths = None, set()
    merge_before = _compiled_variants(split_kv._merge_kernel) if split_kv._merge_kernel.device_caches else 0
    for q_lens, seq_lens in (((1,), (500,)), ((1,) * 5, (700, 3, 16, 650, 100)), ((1,) * 16, (512,) * 16)):
        p = Problem(q_lens, seq_lens, num_heads=32, num_kv_heads=8, head_size=128, config=config)
        t = build(p, "cuda")
        out, lse = run_triton(p, t)
        ref = paged_attention_ref(
            t["q"], t["kv"][:, 0], t["kv"][:, 1], t["block_table"], t["seq_lens"], t["qsl"], softmax_scale=128**-0.5
        )
        failed = {k: v for k, (v, limit) in compare(p, out, lse, *ref).items() if not v <= limit}
        assert not failed, failed
        counts = _compiled_variants(triton_attention._paged_attn_kernel)
        assert before is None or counts == before, f"recompiled for batch {len(q_lens)}: {before} -> {counts}"
        before = counts
        widths.add(split_kv.merge_block_d(len(q_lens), 32, 128, _common.num_sms(torch.device("cuda"))))
        assert _compiled_variants(split_kv._merge_kernel) <= merge_before + len(widths)  # one per head-slice width
