"""The library entry and the CLI command: validation first, package checks, messages and exit codes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from hwtune.cli import bench_all2all
from hwtune.core.devices import CPU_PROFILE
from hwtune.core.environment import current_environment
from hwtune.core.errors import InvalidSpecError, UnknownBackendError
from hwtune.probes.all2all.measure import measure_all2all
from tests.probes.all2all.conftest import wl

NO_SPAWN = {"device": "cpu", "timeout_s": 30}


def test_missing_packages_and_catalogue_rejections_are_unsupported_without_running() -> None:
    recs = measure_all2all(
        wl(8),
        ["deepep_high_throughput", "deepep_low_latency", "pplx", "flashinfer_nvlink_one_sided"],
        **NO_SPAWN,
    )
    by = {r.backend: r for r in recs}
    assert all(r.status == "unsupported" and r.stats is None for r in recs)
    assert by["deepep_high_throughput"].message.startswith("deep_ep is not installed.")
    assert by["deepep_low_latency"].message.startswith("deep_ep is not installed.")
    assert by["pplx"].message.startswith("pplx_kernels is not installed.")
    one = by["flashinfer_nvlink_one_sided"]
    assert "runs on NVIDIA GPUs only" in one.message and "accepts only nvfp4" in one.message
    assert one.extra["catalogue_rejections"] and "groups_spawned" not in one.extra
    env = current_environment(CPU_PROFILE)
    assert one.environment == env.fingerprint() and one.environment_hash == env.hash()
    assert one.workload_key == wl(8).key() and one.tactic == "default"


def test_bad_requests_raise_input_errors() -> None:
    with pytest.raises(UnknownBackendError, match="known all2all backends"):
        measure_all2all(wl(8), ["nccl"], **NO_SPAWN)
    with pytest.raises(InvalidSpecError, match="must equal the workload's EP size"):
        measure_all2all(wl(8), ["naive"], world_size=4, **NO_SPAWN)
    with pytest.raises(InvalidSpecError, match="use 'cuda' or 'cpu'"):
        measure_all2all(wl(8), ["naive"], device="tpu")  # type: ignore[arg-type]


def test_cuda_without_a_gpu_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    from hwtune.probes.all2all import measure as M

    monkeypatch.setattr(M, "device_profile", lambda device: CPU_PROFILE)
    [r] = measure_all2all(wl(8), ["naive"], device="cuda", timeout_s=30)
    assert r.status == "unsupported" and "no NVIDIA GPU is visible" in r.message


def test_explore_runs_a_rejected_candidate_and_records_its_own_refusal(fast: dict) -> None:
    if importlib.util.find_spec("flashinfer") is None:
        pytest.skip("flashinfer is not installed here")
    [r] = measure_all2all(wl(8), ["flashinfer_nvlink_two_sided"], explore=True, **fast)
    assert r.status == "unsupported" and "runs on NVIDIA GPUs only (FlashInfer NVLink kernels)" in r.message
    assert r.extra["explore"] is True and r.extra["catalogue_rejections"]


def test_measure_module_does_not_import_torch() -> None:
    code = "import sys, hwtune.probes.all2all, hwtune.cli.bench_all2all; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def _app() -> typer.Typer:
    app = typer.Typer()
    bench = typer.Typer()
    bench.command("all2all")(bench_all2all.all2all)
    app.add_typer(bench, name="bench")

    @app.callback()
    def _root() -> None:
        """test root"""

    return app


SMALL = ["--world-size", "2", "--hidden-size", "128", "--topk", "2", "--num-experts", "4", "--device", "cpu"]


def test_cli_json_measures_and_exits_zero() -> None:
    res = CliRunner().invoke(
        _app(),
        ["bench", "all2all", "-b", "nccl_alltoallv", "-t", "4", *SMALL, "--time-cap", "0.05", "--json"],
    )
    assert res.exit_code == 0, res.output
    [rec] = json.loads(res.stdout)
    assert rec["backend"] == "nccl_alltoallv" and rec["status"] == "ok" and rec["stats"]["n"] >= 5


def test_cli_unsupported_only_exits_3_and_bad_input_exits_2() -> None:
    res = CliRunner().invoke(_app(), ["bench", "all2all", "-b", "deepep_low_latency,pplx", *SMALL, "--json"])
    assert res.exit_code == 3
    assert [r["status"] for r in json.loads(res.stdout)] == ["unsupported", "unsupported"]
    for bad in (["--routing", "zipf"], ["--quant-dtype", "int3"], ["-b", "nope"]):
        args = ["bench", "all2all", "-b", "naive", *SMALL, *bad]
        res = CliRunner().invoke(_app(), args)
        assert res.exit_code == 2, (bad, res.output)
        assert "Traceback" not in res.output
