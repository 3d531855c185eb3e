"""The examples of issue 18, end to end: what hwtune prints is what the engine version would start with."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

import hwtune
from hwtune import AttentionSpec, BackendNotValidError, NoValidBackendError
from hwtune.cli.main import app
from hwtune.core.devices import simulated
from hwtune.core.environment import current_environment
from hwtune.core.records import LatencyStats, MeasurementRecord
from hwtune.core.types import AttentionWorkload
from hwtune.db.store import Store
from hwtune.selector.api import _cached

runner = CliRunner()
LLAMA_GQA = ["--num-heads", "32", "--num-kv-heads", "8", "--head-size", "128"]
DEEPSEEK = AttentionSpec(
    128,
    1,
    576,
    use_mla=True,
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    block_size=None,
)


def cli(*args: str):
    return runner.invoke(app, ["select", "attention", *args, "--assume-installed", "--db", "none"])


def select(spec, device, **kw):
    return hwtune.select_attention(spec, device=device, assume_installed=True, db=False, **kw)


def test_block_size_128_on_b200_goes_to_flashinfer() -> None:
    """vLLM accepts any multiple of a kernel block size (hybrid blocks): FlashInfer's 16 divides 128."""
    res = cli(*LLAMA_GQA, "--block-size", "128", "--device", "b200", "--format", "vllm")
    assert res.exit_code == 0 and res.stdout.strip() == "--attention-backend FLASHINFER --block-size 128", res.output
    sel = select(AttentionSpec(32, 8, 128, block_size=128), "b200")
    assert [r.backend for r in sel.ranked] == ["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION"]


def test_block_size_not_a_multiple_is_refused_with_the_way_out() -> None:
    with pytest.raises(NoValidBackendError) as err:
        select(AttentionSpec(32, 8, 128, block_size=24), "b200")
    assert (
        "does not support block size 24: vLLM accepts a multiple of one of its kernel block sizes (16, 32, 64)"
        in str(err.value)
    )
    assert "omit --block-size to let vLLM use 16" in str(err.value)


@pytest.mark.parametrize(
    "device, first",
    [("h100", "FLASH_ATTN_MLA"), ("h200", "FLASH_ATTN_MLA"), ("b200", "FLASHINFER_MLA"), ("gb200", "FLASHINFER_MLA")],
)
def test_mla_without_a_block_size_is_not_triton_mla_on_hopper_and_blackwell(device: str, first: str) -> None:
    sel = select(DEEPSEEK, device)
    assert sel.backend == first
    size = 16 if first == "FLASH_ATTN_MLA" else 32
    assert f"no block size given: vLLM 0.33.0 runs {first} at block size {size}" in sel.notes
    res = cli("--mla", "--num-heads", "128", "--device", device, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["backend"] == first, res.output


def test_mla_with_block_16_on_blackwell_is_triton_mla_as_in_vllm() -> None:
    """Given --block-size 16, vLLM itself takes TRITON_MLA on SM 10.x (FLASHINFER_MLA needs 32 or 64, CUTLASS 128)."""
    import dataclasses

    sel = select(dataclasses.replace(DEEPSEEK, block_size=16), "b200")
    assert sel.backend == "TRITON_MLA"
    assert "kernel block sizes (32, 64)" in " ".join(sel.rejected["FLASHINFER_MLA"])


def test_flash_attn_mla_on_sm90_and_flashmla_for_fp8() -> None:
    import dataclasses

    assert select(DEEPSEEK, "sm90").backend == "FLASH_ATTN_MLA"
    fp8 = select(dataclasses.replace(DEEPSEEK, kv_cache_dtype="fp8"), "sm90")
    assert fp8.backend == "FLASHMLA"  # FLASH_ATTN_MLA takes no fp8 cache; FlashMLA needs block 64, its preferred
    assert (
        "FLASH_ATTN_MLA" in fp8.rejected
        and "no block size given: vLLM 0.33.0 runs FLASHMLA at block size 64" in fp8.notes
    )
    assert select(DEEPSEEK, "sm120").backend == "TRITON_MLA"  # vLLM 0.33.0 lists TRITON_MLA first on SM 12.x


@pytest.mark.parametrize("kv", ["turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"])
def test_vllm_turboquant_kv_cache_names_are_accepted(kv: str) -> None:
    res = cli(*LLAMA_GQA, "--kv-cache-dtype", kv, "--device", "h100", "--format", "vllm")
    expected = f"--attention-backend TURBOQUANT --block-size 16 --kv-cache-dtype {kv}"
    assert res.exit_code == 0 and res.stdout.strip() == expected, res.output


def test_hwtunes_own_turboquant_format_points_to_engine_none() -> None:
    res = cli(*LLAMA_GQA, "--kv-cache-dtype", "turboquant_4bit", "--device", "h100")
    assert res.exit_code == 3 and "HWTUNE_TURBOQUANT is not one of vLLM 0.33.0's backends" in res.stderr
    res = cli(*LLAMA_GQA, "--kv-cache-dtype", "turboquant_4bit", "--device", "h100", "--engine", "none")
    assert res.exit_code == 0 and res.stdout.strip().splitlines()[-1] == "HWTUNE_TURBOQUANT", res.output


def test_engine_version_and_bad_engine_names() -> None:
    res = cli(*LLAMA_GQA, "--device", "h100", "--engine-version", "0.32.0", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["engine"] == {"engine": "vllm", "version": "0.32.0"}
    res = cli(*LLAMA_GQA, "--device", "h100", "--engine-version", "0.30.0")
    assert res.exit_code == 2 and "no snapshot of vLLM 0.30.0; known: 0.33.0, 0.32.0" in res.stderr


@pytest.mark.parametrize(
    "device, extra, flag",
    [
        ("h100", [], "fa3"),
        ("b200", [], "trtllm_mha"),
        ("a100", [], "flashinfer"),
        ("a100", ["--sinks"], "triton"),
        ("h100", ["--kv-cache-dtype", "fp8_e5m2"], "triton"),  # fa3 takes e4m3 only: SGLang rewrites to triton
        ("h100", ["--spec-tokens", "3", "--block-size", "16"], "flashinfer"),  # topk 1 with page size > 1
    ],
)
def test_sglang_defaults(device: str, extra: list[str], flag: str) -> None:
    res = cli(*LLAMA_GQA, "--device", device, "--engine", "sglang", *extra, "--format", "sglang")
    assert res.exit_code == 0 and res.stdout.startswith(f"--attention-backend {flag}"), res.output


def test_a_deliberate_difference_is_explained() -> None:
    """Head size 320 on SM 10.x: vLLM accepts FLASH_ATTN (FA4 is built) but resolves FA2, which runs head sizes up to
    256 only; hwtune rejects it up front and says so."""
    res = runner.invoke(
        app,
        ["select", "attention", "--num-heads", "32", "--num-kv-heads", "8", "--head-size", "320", "--device", "b200"]
        + ["--assume-installed", "--db", "none", "--explain"],
    )
    assert res.exit_code == 0, res.output
    assert "with vLLM 0.33.0: TRITON_ATTN" in res.stderr
    assert "hwtune differs from vLLM 0.33.0 here on purpose: vLLM 0.33.0 would choose FLASH_ATTN" in res.stderr
    assert "deliberate differences from vLLM 0.33.0 (rejected up front):" in res.stderr
    assert "FA2 runs head dimensions up to 256 only; hwtune rejects it up front" in res.stderr


def _grid(spec: AttentionSpec, backend: str, us: float, tactic: str = "default", device: str = "h100") -> list:
    """Decode and prefill measurements of ``spec`` covering the default workload mix, flat at ``us``."""
    env = current_environment(simulated(device))
    shapes = [AttentionWorkload(spec, "decode", b, c) for b in (1, 4, 16, 64, 256) for c in (512, 2048, 8192, 32768)]
    shapes += [
        AttentionWorkload(spec, "prefill", 1, chunk + prefix, query_len=chunk)
        for chunk in (512, 2048, 8192)
        for prefix in (0, 8192)
    ]
    return [
        MeasurementRecord(
            kind="attention",
            workload=w.to_dict(),
            workload_key=w.key(),
            backend=backend,
            tactic=tactic,
            status="ok",
            stats=LatencyStats.from_samples([us] * 3),
            environment=env.fingerprint(),
            environment_hash=env.hash(),
            host="node-a",
            run_id="run-a",
        )
        for w in shapes
    ]


def test_without_a_block_size_each_backend_is_ranked_at_the_size_the_engine_runs_it(tmp_path) -> None:
    """No --block-size: vLLM runs FLASHMLA at 64 and TRITON_MLA at 16, so their measurements at those sizes count,
    and FLASHMLA's at 16 (a size vLLM would not run it at) does not."""
    import dataclasses

    url = f"sqlite:///{tmp_path / 's.db'}"
    at = {b: dataclasses.replace(DEEPSEEK, block_size=b) for b in (16, 64)}
    with Store.open(url) as s:
        s.write(_grid(at[64], "FLASHMLA", 5.0) + _grid(at[16], "TRITON_MLA", 9.0) + _grid(at[16], "FLASHMLA", 50.0))
    _cached.cache_clear()
    sel = hwtune.select_attention(DEEPSEEK, device="h100", assume_installed=True, db=url)
    _cached.cache_clear()
    assert [r.backend for r in sel.ranked] == ["FLASHMLA", "TRITON_MLA", "FLASH_ATTN_MLA"]
    assert sel.ranked[0].source != "static" and sel.ranked[0].latency_us == pytest.approx(5.0)  # not 50: block 16
    assert sel.ranked[2].source == "static"  # hwtune runs no kernel of vLLM's FLASH_ATTN_MLA
    assert "no block size given: vLLM 0.33.0 runs FLASHMLA at block size 64" in sel.notes


def test_a_requested_backend_is_not_reported_as_a_difference() -> None:
    sel = select(AttentionSpec(32, 8, 128), "h100", backend="FLASHINFER")
    assert sel.backend == "FLASHINFER" and not any("differs from vLLM" in n for n in sel.notes)


def test_sglang_takes_a_requested_backend_it_accepts_and_refuses_one_it_does_not() -> None:
    """flashmla is one of SGLang's accepted MLA backends on Hopper; trtllm_mla needs Blackwell (SGLang raises); a
    choice hwtune does not model (dsa) is taken as asked, saying that SGLang validates it itself."""
    sel = select(DEEPSEEK, "h100", engine="sglang", backend="flashmla")
    assert sel.backend == "flashmla" and sel.to_sglang_args() == [
        "--attention-backend",
        "flashmla",
        "--page-size",
        "64",
    ]
    assert "SGLang 0.5.23 runs flashmla at page size 64 (no page size given)" in sel.notes
    assert select(DEEPSEEK, "h100", engine="sglang").backend == "fa3"  # its default for MLA on Hopper
    with pytest.raises(
        BackendNotValidError, match="trtllm_mla needs Blackwell, SM 10.x or 12.x; this device is SM 9.0"
    ):
        select(DEEPSEEK, "h100", engine="sglang", backend="trtllm_mla")
    sel = select(DEEPSEEK, "h100", engine="sglang", backend="dsa")
    assert sel.backend == "dsa"
    assert any("SGLang 0.5.23 validates an explicit --attention-backend itself" in n for n in sel.notes)


def test_hwtunes_own_kernels_have_no_engine_flag() -> None:
    from hwtune.selector.engine_flags import NoEngineEquivalentError

    sel = select(AttentionSpec(32, 8, 128, dcp_size=2), "h100", engine=None, backend="HWTUNE_TRITON_ATTN")
    with pytest.raises(NoEngineEquivalentError, match="hwtune's own Triton kernel; vLLM cannot load it"):
        sel.to_vllm_args()


def test_sglang_backends_are_ranked_by_the_kernels_they_run(tmp_path) -> None:
    """SGLang's trtllm_mha is FLASHINFER's trtllm-gen tactic and its flashinfer is FLASHINFER's fa2 wrappers (tensor
    cores for a GQA group of 4): each is costed by its own kernel's points, never by another tactic's (xqa here is
    the fastest and runs in neither)."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = AttentionSpec(32, 8, 128)
    with Store.open(url) as s:
        s.write(
            _grid(spec, "FLASHINFER", 20.0, "trtllm-gen", "b200")
            + _grid(spec, "FLASHINFER", 5.0, "fa2-tc", "b200")
            + _grid(spec, "FLASHINFER", 1.0, "xqa", "b200")
        )
    _cached.cache_clear()
    sel = hwtune.select_attention(spec, device="b200", assume_installed=True, db=url, engine="sglang")
    vllm = hwtune.select_attention(spec, device="b200", assume_installed=True, db=url)
    _cached.cache_clear()
    costs = {r.backend: r.latency_us for r in sel.ranked if r.source != "static"}
    assert costs == {"flashinfer": pytest.approx(5.0), "trtllm_mha": pytest.approx(20.0)}
    assert sel.backend == "flashinfer" and sel.ranked[0].tactics == {"decode": "fa2-tc", "prefill": "fa2-tc"}
    assert sel.to_sglang_args()[:2] == ["--attention-backend", "flashinfer"]
    assert vllm.backend == "FLASHINFER" and vllm.ranked[0].latency_us == pytest.approx(1.0)  # vLLM: any tactic


def test_sglang_model_overrides_follow_the_architecture() -> None:
    """SGLang 0.5.23 sets trtllm_mla for DeepseekV3ForCausalLM on SM 10.x and per-platform backends for gpt-oss
    (its model overrides); a spec given by head counts, without an architecture, gets the generic default."""
    deepseek = dataclasses.replace(DEEPSEEK, block_size=None)
    assert select(
        dataclasses.replace(deepseek, architecture="DeepseekV3ForCausalLM"), "b200", engine="sglang"
    ).backend == ("trtllm_mla")
    assert select(deepseek, "b200", engine="sglang").backend != "trtllm_mla"
    res = cli(
        "--model", "tests/data/models/gpt-oss-120b.json", "--device", "b200", "--engine", "sglang", "--format", "args"
    )
    assert res.exit_code == 0 and res.stdout.split()[:2] == ["--attention-backend", "trtllm_mha"], res.output
    res = cli(
        "--model", "tests/data/models/gpt-oss-120b.json", "--device", "a100", "--engine", "sglang", "--format", "args"
    )
    assert res.stdout.split()[:2] == ["--attention-backend", "triton"], res.output
