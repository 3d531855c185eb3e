"""The CLI: JSON only on stdout, exit codes 0/2/3, one clear line for bad input, no tracebacks."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app

runner = CliRunner()
HEADS = ["--num-heads", "32", "--num-kv-heads", "8", "--head-size", "128"]


def run(*args: str):
    return runner.invoke(app, list(args))


def test_select_attention_json_has_the_documented_fields() -> None:
    res = run("select", "attention", *HEADS, "--device", "sm90", "--assume-installed", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["backend"] == "FLASH_ATTN" and data["tactic"] == "fa3"
    assert [r["backend"] for r in data["ranked"]][:2] == ["FLASH_ATTN", "FLASHINFER"]
    assert all(r["source"] == "static" for r in data["ranked"])
    assert "TURBOQUANT" in data["rejected"] and isinstance(data["rejected"]["TURBOQUANT"], list)


def test_sm100_ranks_flashinfer_first_cli() -> None:
    res = run("select", "attention", *HEADS, "--device", "sm100", "--assume-installed", "--json")
    assert json.loads(res.stdout)["backend"] == "FLASHINFER"


def test_dcp_request_exit_3_with_message() -> None:
    res = run(
        "select",
        "attention",
        *HEADS,
        "--device",
        "sm90",
        "--assume-installed",
        "--dcp",
        "2",
        "--backend",
        "TRITON_ATTN",
    )
    assert res.exit_code == 3
    assert "run without DCP (--dcp 1)" in res.stderr and "Traceback" not in res.output


def test_json_error_object_on_stdout() -> None:
    res = run(
        "select",
        "attention",
        *HEADS,
        "--device",
        "sm90",
        "--assume-installed",
        "--dcp",
        "2",
        "--backend",
        "TRITON_ATTN",
        "--json",
    )
    assert res.exit_code == 3
    err = json.loads(res.stdout)["error"]
    assert err["type"] == "BackendNotValidError" and err["valid"] == ["FLASH_ATTN", "FLASHINFER"]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--num-heads", "0", "--num-kv-heads", "1", "--head-size", "64"], "Invalid value for '--num-heads'"),
        (["--num-heads", "32", "--num-kv-heads", "5", "--head-size", "128"], "must be a multiple of num_kv_heads"),
        ([*HEADS, "--kv-cache-dtype", "fp9"], "unknown kv-cache dtype 'fp9'"),
        ([*HEADS, "--dtype", "int7"], "unknown dtype 'int7'"),
        ([*HEADS, "--backend", "FLASHY"], "unknown attention backend 'FLASHY'; known attention backends: FLASHINFER"),
        (["--num-heads", "32"], "give --model config.json, or all of --num-heads"),
        ([*HEADS, "--device", "sm42"], "unknown device 'sm42'"),
        (["--model", "/nonexistent/config.json"], "no model config at"),
    ],
)
def test_bad_input_exit_2_one_line(args: list[str], words: str) -> None:
    res = run("select", "attention", *args)
    assert res.exit_code == 2, res.output
    assert words in unboxed(res.stderr)  # a usage error's message, as typer's error panel wraps it
    assert "Traceback" not in res.output


def unboxed(text: str) -> str:
    """Text with typer's error-panel borders removed and its wrapped lines joined."""
    return " ".join(" ".join(line.strip().strip("│╭╮╰╯─").split()) for line in text.splitlines()).strip()


def test_all2all_wrong_quant_names_nvfp4() -> None:
    res = run(
        "select",
        "all2all",
        "--device",
        "b200",
        "--assume-installed",
        "--quant-dtype",
        "bf16",
        "--backend",
        "flashinfer_nvlink_one_sided",
    )
    assert res.exit_code == 3
    assert "accepts only nvfp4 activations" in res.stderr and "--quant-dtype nvfp4" in res.stderr


def test_all2all_bad_sizes_exit_2() -> None:
    res = run("select", "all2all", "--ep-size", "0")
    assert res.exit_code == 2 and "Invalid value for '--ep-size'" in res.stderr


def test_vllm_format() -> None:
    res = run("select", "attention", *HEADS, "--device", "sm100", "--assume-installed", "--format", "vllm")
    assert res.exit_code == 0 and res.stdout.strip() == "--attention-backend FLASHINFER --block-size 16"


def test_backends_json_and_probe_json() -> None:
    res = run("backends", "--kind", "all2all", "--json")
    assert res.exit_code == 0
    names = [b["name"] for b in json.loads(res.stdout)]
    assert "flashinfer_nvlink_one_sided" in names
    res = run("probe", "--json")
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert set(data) >= {"device", "stack", "fingerprint", "environment_hash"}


def test_console_script_and_module_entry_points() -> None:
    out = subprocess.run([sys.executable, "-m", "hwtune", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip()
    out = subprocess.run(
        [sys.executable, "-m", "hwtune", "select", "attention", *HEADS, "--device", "cpu", "--json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and json.loads(out.stdout)["backend"] == "TORCH_SDPA"


def test_select_from_a_store_with_per_phase(tmp_path) -> None:
    from hwtune.db.store import Store
    from hwtune.selector.api import _cached
    from tests.selector.test_measured import base, grid

    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as s:
        s.write(grid(base))
    _cached.cache_clear()
    res = run("select", "attention", *HEADS, "--device", "h100", "--assume-installed", "--db", url, "--json")
    data = json.loads(res.stdout)
    assert res.exit_code == 0 and data["backend"] == "FLASHINFER"
    assert data["ranked"][0]["source"] in ("measured", "interpolated") and data["dispatch"]
    assert data["per_phase"] == {"decode": "FLASHINFER", "prefill": "FLASHINFER"}
    res = run("select", "attention", *HEADS, "--device", "h100", "--assume-installed", "--db", url, "--per-phase")
    assert "decode: FLASHINFER" in res.stderr and "prefill: FLASHINFER" in res.stderr
    res = run("select", "attention", *HEADS, "--device", "h100", "--assume-installed", "--db", "none", "--json")
    assert all(r["source"] == "static" for r in json.loads(res.stdout)["ranked"])
    _cached.cache_clear()
