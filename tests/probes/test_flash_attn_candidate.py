"""FLASH_ATTN's candidate says which FlashAttention version cannot run here and why (CPU)."""

from __future__ import annotations

import types

from hwtune.probes.attention.candidates import flash_attn


def _vllm_fa(**flags: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(flash_attn_interface=types.SimpleNamespace(**flags))


def test_a_version_whose_extension_did_not_load_is_unavailable_with_its_reason() -> None:
    mod = _vllm_fa(FA2_AVAILABLE=False, FA2_UNAVAILABLE_REASON="No module named '_vllm_fa2_C'", FA3_AVAILABLE=True)
    why = flash_attn.extension_missing("vllm_flash_attn", mod, 2)
    assert why is not None and "FA2" in why and "_vllm_fa2_C" in why
    assert flash_attn.extension_missing("vllm_flash_attn", mod, 3) is None
    assert flash_attn.extension_missing("flash_attn", mod, 2) is None  # Dao-AILab's package: no such flags


def test_off_cuda_the_candidate_is_unavailable() -> None:
    from hwtune.core.types import AttentionSpec, AttentionWorkload

    w = AttentionWorkload(AttentionSpec(32, 8, 128), "decode", 2, 64)
    assert flash_attn.FlashAttnCandidate().unavailable(w, "fa3", "cpu") == "FlashAttention runs on CUDA GPUs only"


def test_a_package_that_fails_to_import_is_a_reason_not_a_crash(monkeypatch) -> None:
    from hwtune.core.types import AttentionSpec, AttentionWorkload

    def broken() -> None:
        raise ImportError("vllm.vllm_flash_attn requires the CUDA flash attention extensions")

    monkeypatch.setattr(flash_attn, "flash_attn_module", broken)
    w = AttentionWorkload(AttentionSpec(32, 8, 128), "decode", 2, 64)
    why = flash_attn.FlashAttnCandidate().unavailable(w, "fa3", "cuda")
    assert why is not None and "cannot be imported" in why and "extensions" in why


class _FakeVllmFa:
    """vllm_flash_attn's two calls the runner makes, recording the split cap each was given: a schedule of one int32
    per request, an attention that writes ``out`` and returns a fresh heads-first LSE (as FA3 does)."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.scheduled: list[int] = []

    def get_scheduler_metadata(self, *, batch_size: int, cache_seqlens, num_splits: int, **_: object):  # noqa: ANN001, ANN201
        self.scheduled.append(num_splits)
        return cache_seqlens.clone() + batch_size

    def flash_attn_varlen_func(self, q, k, v, *, out, num_splits: int = 0, **_: object):  # noqa: ANN001, ANN201
        import torch

        self.calls.append(num_splits)
        out.fill_(1.0)
        lse = torch.arange(q.shape[1] * q.shape[0], dtype=torch.float32).reshape(q.shape[1], q.shape[0])
        return out, lse


def _runner(monkeypatch, phase="prefill", batch=2, context=48, query=16, sinks=False, tactic="fa3"):  # noqa: ANN001, ANN202
    from hwtune.core.types import AttentionSpec, AttentionWorkload
    from hwtune.probes.attention.problem import build_problem

    fake = _FakeVllmFa()
    monkeypatch.setattr(flash_attn, "flash_attn_module", lambda: ("vllm_flash_attn", fake))
    w = AttentionWorkload(AttentionSpec(4, 2, 64, sinks=sinks), phase, batch, context, query_len=query)
    problem = build_problem(w, "cpu", seed=0)
    return flash_attn.FlashAttnRunner(tactic, sinks=sinks), problem, fake, w


def test_the_timed_call_is_flash_attention_alone_and_the_lse_is_transposed_outside_it(monkeypatch) -> None:
    import torch

    runner, problem, fake, _ = _runner(monkeypatch)
    runner.prepare(problem)
    runner.run()
    assert len(fake.calls) == 1
    heads_first = runner.lse
    assert heads_first is not None and heads_first.shape == (4, problem.num_tokens)  # kept as returned
    torch.testing.assert_close(runner.lse_natural(), heads_first.transpose(0, 1))


def _prepared_run(monkeypatch, *shape, tactic="fa3"):  # noqa: ANN001, ANN202
    runner, problem, fake, _ = _runner(monkeypatch, *shape, tactic=tactic)
    runner.prepare(problem)
    runner.run()
    return runner, fake


def test_fa3_runs_as_vllm_runs_it_uniform_decode_graphed_and_small_batches_with_capped_splits(monkeypatch) -> None:
    cap, most = flash_attn.VLLM_GRAPH_MAX_SPLITS, flash_attn.VLLM_GRAPH_MAX_TOKENS
    for batch in (8, most):  # a uniform decode batch up to vLLM's largest graph: graphed, splits capped
        runner, fake = _prepared_run(monkeypatch, "decode", batch, 300, 1)
        assert runner.supports_graphs and fake.scheduled == fake.calls == [cap], batch
    runner, fake = _prepared_run(monkeypatch, "decode", most + 1, 300, 1)  # past it: eager, FA3's heuristic
    assert not runner.supports_graphs and fake.scheduled == fake.calls == [0]
    runner, fake = _prepared_run(monkeypatch, "prefill", 1, 2000, 96)  # a small prefill: eager (piecewise), capped
    assert not runner.supports_graphs and fake.scheduled == fake.calls == [cap]
    runner, fake = _prepared_run(monkeypatch, "prefill", 1, most + 1, most + 1)
    assert not runner.supports_graphs and fake.scheduled == fake.calls == [0]
    runner, fake = _prepared_run(monkeypatch, "decode", 8, 300, 1, tactic="fa2")  # FA2: no schedule, no graph
    assert not runner.supports_graphs and fake.scheduled == [] and fake.calls == [0]


def test_a_second_prepare_rewrites_the_schedule_and_sinks_in_place_and_refuses_another_shape(monkeypatch) -> None:
    import pytest
    import torch

    from hwtune.probes.attention.problem import build_problem

    runner, problem, _, w = _runner(monkeypatch, sinks=True)
    problem.sinks = torch.randn(4)  # float32: the runner keeps a bf16 copy, which a graph would read
    runner.prepare(problem)
    schedule, s_aux = runner.schedule, runner.s_aux
    before = schedule.clone()
    second = build_problem(w, "cpu", seed=1, like=problem, lengths=([16, 16], [40, 30]))
    second.sinks = torch.randn(4)
    runner.prepare(second)
    assert runner.schedule is schedule and runner.s_aux is s_aux  # the addresses a captured graph reads
    assert not bool((runner.schedule == before).all())  # with batch B's values
    torch.testing.assert_close(runner.s_aux, second.sinks.to(torch.bfloat16))
    other = _runner(monkeypatch, "prefill", 3, 48, 16, sinks=True)[1]
    with pytest.raises(ValueError, match="a runner serves batches of one shape"):
        runner.prepare(other)
    assert runner.problem is second  # refused before anything changed
    kept, other_kept = torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
    with pytest.raises(ValueError, match="one shape"):
        flash_attn.in_place((kept, torch.zeros(2, dtype=torch.int64)))
    with pytest.raises(ValueError, match="one shape"):  # every pair checked before any is copied
        flash_attn.in_place((other_kept, torch.ones(2, dtype=torch.int32)), (kept, torch.zeros(3, dtype=torch.int32)))
    assert not bool(other_kept.any())


def test_flash_attn_mla_runs_as_vllm_runs_it_and_transposes_its_lse_outside_the_timed_call(monkeypatch) -> None:
    import dataclasses
    from pathlib import Path

    import torch

    from hwtune.core.model_config import attention_spec, load_model_config
    from hwtune.core.types import AttentionWorkload
    from hwtune.probes.attention.candidates import mla_flash_attn
    from hwtune.probes.attention.problem import build_problem

    models = Path(__file__).resolve().parents[1] / "data" / "models"
    spec = dataclasses.replace(attention_spec(load_model_config(models / "deepseek-v3.json"), 8), num_heads=2)
    fake = _FakeVllmFa()
    monkeypatch.setattr(mla_flash_attn, "flash_attn_module", lambda: ("vllm_flash_attn", fake))
    runner = mla_flash_attn.FlashAttnMlaRunner()  # one query a request where the spec decodes two: not uniform
    runner.prepare(build_problem(AttentionWorkload(dataclasses.replace(spec, spec_tokens=1), "decode", 4, 40), "cpu"))
    assert not runner.supports_graphs
    w = AttentionWorkload(spec, "decode", 4, 40)
    runner = mla_flash_attn.FlashAttnMlaRunner()
    first = build_problem(w, "cpu", seed=0)
    runner.prepare(first)
    schedule = runner.schedule
    runner.prepare(build_problem(w, "cpu", seed=1, like=first, lengths=([1] * 4, [30, 40, 20, 10])))
    assert runner.schedule is schedule  # rewritten where a captured graph reads it
    for batch, graphed, cap in (
        (4, True, flash_attn.VLLM_GRAPH_MAX_SPLITS),
        (flash_attn.VLLM_GRAPH_MAX_TOKENS + 1, False, 0),
    ):
        fake = _FakeVllmFa()
        monkeypatch.setattr(mla_flash_attn, "flash_attn_module", lambda fake=fake: ("vllm_flash_attn", fake))
        problem = build_problem(AttentionWorkload(spec, "decode", batch, 40), "cpu", seed=0)
        runner = mla_flash_attn.FlashAttnMlaRunner()
        runner.prepare(problem)
        runner.run()
        assert runner.supports_graphs is graphed and fake.scheduled == fake.calls == [cap], batch
        assert runner.lse is not None and runner.lse.shape == (2, problem.num_tokens)  # as returned, heads first
        torch.testing.assert_close(runner.lse_natural(), runner.lse.transpose(0, 1))
