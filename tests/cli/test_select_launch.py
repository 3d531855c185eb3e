"""``hwtune select --format args|env|json``: what starts the engine, MoE all2all choice included."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from hwtune.cli.main import app

runner = CliRunner()
HEADS = ["--num-heads", "32", "--num-kv-heads", "8", "--head-size", "128"]


def run(*args: str):
    return runner.invoke(app, list(args))


def test_args_and_env_formats_carry_the_all2all_choice_of_a_moe_model() -> None:
    common = ("select", "attention", "--model", "tests/data/models/deepseek-v3.json", "--tp", "8", "--ep-size", "8")
    common += ("--device", "h100", "--assume-installed", "--db", "none")
    res = run(*common, "--format", "args")
    assert res.exit_code == 0, res.output
    args = res.stdout.split()
    assert args[:2] == ["--attention-backend", "FLASH_ATTN_MLA"] and "--all2all-backend" in args
    res = run(*common, "--format", "env")
    assert res.exit_code == 0 and res.stdout.startswith("export HWTUNE_VLLM_ARGS='--attention-backend FLASH_ATTN_MLA")
    res = run(*common, "--json")
    launch = json.loads(res.stdout)["launch"]
    assert launch["args"] == args and launch["engine"] == "vllm" and json.loads(res.stdout)["all2all"]["backend"]
    res = run(*common, "--engine", "sglang", "--format", "args")
    assert res.exit_code == 0 and "--moe-a2a-backend" in res.stdout.split(), res.output


def test_ep_size_needs_a_moe_model() -> None:
    res = run("select", "attention", *HEADS, "--ep-size", "8", "--device", "h100", "--db", "none")
    assert res.exit_code == 2 and "give the model with --model" in res.stderr
    res = run("select", "attention", "--model", "tests/data/models/llama-3.1-8b.json", "--ep-size", "8", "--db", "none")
    assert res.exit_code == 2, res.output


def test_args_format_of_hwtunes_own_catalogue_says_which_engine() -> None:
    res = run("select", "attention", *HEADS, "--device", "h100", "--engine", "none", "--db", "none", "--format", "args")
    assert res.exit_code == 2 and "say which engine" in res.stderr


def test_engine_is_a_choice_listed_in_help() -> None:
    res = run("select", "attention", *HEADS, "--engine", "vlm", "--db", "none")
    assert res.exit_code == 2 and "unknown engine 'vlm'" in res.stderr
    wide = runner.invoke(app, ["select", "attention", "--help"], env={"COLUMNS": "200"}).stdout
    assert "<vllm|sglang|none|hwtune>" in wide


def test_a_model_mixing_windowed_and_full_attention_layers_is_ranked_over_both() -> None:
    gpt_oss = run(
        "select", "attention", "--model", "tests/data/models/gpt-oss-120b.json", "--tp", "8", "--device", "h100",
        "--assume-installed", "--db", "sqlite:////nonexistent/none.db", "--json",
    )  # fmt: skip
    assert gpt_oss.exit_code == 0, gpt_oss.output
    notes = json.loads(gpt_oss.stdout)["notes"]
    assert any("ranked over every layer (18 windowed, 18 full-attention)" in n for n in notes), notes
    llama = run(
        "select", "attention", "--model", "tests/data/models/llama-3.1-8b.json", "--device", "h100", "--json",
        "--db", "sqlite:////nonexistent/none.db",
    )  # fmt: skip
    assert llama.exit_code == 0 and not any("every layer" in n for n in json.loads(llama.stdout)["notes"])
