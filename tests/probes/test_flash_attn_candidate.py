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
    """vllm_flash_attn's two calls the runner makes: a schedule of one int32 per request, an attention that writes
    ``out`` and returns a fresh heads-first LSE (as FA3 does)."""

    def __init__(self) -> None:
        self.calls = 0

    def get_scheduler_metadata(self, *, batch_size: int, cache_seqlens, **_: object):  # noqa: ANN001, ANN201
        return cache_seqlens.to(dtype=cache_seqlens.dtype).clone() + batch_size

    def flash_attn_varlen_func(self, q, k, v, *, out, **_: object):  # noqa: ANN001, ANN201
        import torch

        self.calls += 1
        out.fill_(1.0)
        lse = torch.arange(q.shape[1] * q.shape[0], dtype=torch.float32).reshape(q.shape[1], q.shape[0])
        return out, lse


def _runner(monkeypatch, tactic: str = "fa3"):  # noqa: ANN001, ANN202
    from hwtune.core.types import AttentionSpec, AttentionWorkload
    from hwtune.probes.attention.problem import build_problem

    fake = _FakeVllmFa()
    monkeypatch.setattr(flash_attn, "flash_attn_module", lambda: ("vllm_flash_attn", fake))
    w = AttentionWorkload(AttentionSpec(4, 2, 64), "prefill", 2, 48, query_len=16)
    problem = build_problem(w, "cpu", seed=0)
    return flash_attn.FlashAttnRunner(tactic), problem, fake, w


def test_the_timed_call_is_flash_attention_alone_and_the_lse_is_transposed_outside_it(monkeypatch) -> None:
    import torch

    runner, problem, fake, _ = _runner(monkeypatch)
    runner.prepare(problem)
    runner.run()
    assert fake.calls == 1
    heads_first = runner.lse
    assert heads_first is not None and heads_first.shape == (4, problem.num_tokens)  # kept as returned
    torch.testing.assert_close(runner.lse_natural(), heads_first.transpose(0, 1))


def test_fa3_replays_from_a_graph_and_a_second_prepare_rewrites_its_schedule_in_place(monkeypatch) -> None:
    from hwtune.probes.attention.problem import build_problem

    runner, problem, _, w = _runner(monkeypatch)
    assert runner.supports_graphs
    runner.prepare(problem)
    schedule = runner.schedule
    before = schedule.clone()
    second = build_problem(w, "cpu", seed=1, like=problem, lengths=([16, 16], [40, 30]))
    runner.prepare(second)
    assert runner.schedule is schedule  # the address a captured graph reads
    assert not bool((runner.schedule == before).all())  # with batch B's values
    assert not flash_attn.FlashAttnRunner("fa2").supports_graphs  # FA2: not captured (not measured captured)
