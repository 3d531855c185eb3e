"""The main job on a machine without a GPU: said up front, where the results went and how to select from them,
and a winners table that reads in an 80-column terminal."""

from __future__ import annotations

import io
import json
import re
import shlex
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from hwtune.cli import common
from hwtune.cli.main import app
from hwtune.core.devices import CPU_PROFILE

PLAN = """
name = "cpu-first-hour"
time_cap_s = 0.05
[[attention]]
num_heads = 4
num_kv_heads = 2
head_size = 32
dtype = "float32"
kv_layout = "NHD"
backends = ["TORCH_SDPA:math"]
[[attention.decode]]
batch = [2]
context = [64]
"""


def test_tune_without_a_gpu_says_so_and_says_where_and_what_next(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("hwtune.core.detect.detect", lambda: CPU_PROFILE)  # no GPU, even on a GPU node
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    db = str(tmp_path / "results.db")
    res = CliRunner().invoke(app, ["tune", "--plan", str(plan), "--db", db, "--no-warmup"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "no CUDA GPU: measuring CPU backends; use --device to plan for a GPU (with --dry-run)"
    assert f"stored in sqlite:///{db}" in res.output
    assert any(
        re.fullmatch(r"time \(s\): warm-up \(JIT\) 0; measuring, compilation included, TORCH_SDPA \d+", x)
        for x in lines
    )
    command = next(line for line in lines if line.startswith("select from it: ")).removeprefix("select from it: ")
    assert command.startswith(
        "hwtune select attention --num-heads 4 --num-kv-heads 2 --head-size 32 --dtype float32 --kv-layout NHD"
    )
    selected = CliRunner().invoke(app, [*shlex.split(command)[1:], "--json"])  # the printed command works as printed
    assert selected.exit_code == 0, selected.output
    assert f"using configured store {db}" in json.loads(selected.stdout)["notes"]  # the store tune wrote


@pytest.mark.parametrize("width", [80, 100])
def test_the_winners_table_reads_at_80_columns(width: int) -> None:
    rows = [
        {
            "label": f"decode b{b} ctx{c} q4 [h32/8/128, kv fp8_e5m2, HND, dcp2, ragged]",
            "backend": "FLASHINFER",
            "tactic": "trtllm-gen",
            "median_us": 12345.678,
            "runner_up": "FLEX_ATTENTION/compiled",
            "margin": 0.4567,
            "failures": 3,
        }
        for b in (1, 256)
        for c in (512, 131072)
    ]
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(common.winners_table(rows))
    text = buf.getvalue()
    assert all(len(line) <= width for line in text.splitlines()), text
    assert "…" not in text, text  # nothing cut off
    for word in rows[-1]["label"].split():  # the whole label is there, wrapped at its spaces
        assert word in text, (word, text)
    assert text.count("FLASHINFER/trtllm-gen") == 4 and text.count("12345.7") == 4 and text.count("+46%") == 4
