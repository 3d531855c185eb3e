"""Conventions people expect of a CLI: -v/-q as logging levels (and a library that stays silent by itself), the
store's env var attached to --db and shown in --help, shell completion, --json output, exports written atomically."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.core.errors import StoreError
from hwtune.db.store import Store
from tests.db.helpers import variety


def run(*args: str, **kw):
    return CliRunner().invoke(app, list(args), **kw)


@pytest.fixture()
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'results.db'}"
    with Store.open(url) as store:
        store.write(variety())
    return url


def test_quiet_and_verbose_set_the_logging_level(tmp_path: Path) -> None:
    shown = run("db", "upgrade", "--db", str(tmp_path / "a" / "x.db"))
    assert shown.exit_code == 0 and "created the folder" in shown.output  # a warning: shown by default
    quiet = run("-q", "db", "upgrade", "--db", str(tmp_path / "b" / "x.db"))
    assert quiet.exit_code == 0 and "created the folder" not in quiet.output
    assert logging.getLogger("hwtune").level == logging.ERROR
    assert run("-vv", "backends", "--json").exit_code == 0
    assert logging.getLogger("hwtune").level == logging.DEBUG
    assert run("backends", "--json").exit_code == 0
    assert logging.getLogger("hwtune").level == logging.WARNING
    assert sum(getattr(h, "_hwtune_cli", False) for h in logging.getLogger("hwtune").handlers) == 1


def test_the_library_leaves_logging_to_the_application() -> None:
    code = "import logging, hwtune; print([type(h).__name__ for h in logging.getLogger('hwtune').handlers])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['NullHandler']"


def test_db_env_var_is_attached_to_the_option_and_shown(store_url: str) -> None:
    for command in (["show"], ["tune"], ["report"], ["select", "attention"], ["db", "status"]):
        assert "HWTUNE_DATABASE_URL" in run(*command, "--help").output, command
    res = run("show", "--json", env={"HWTUNE_DATABASE_URL": store_url})
    assert res.exit_code == 0 and len(json.loads(res.stdout)) == len(variety())


def test_shell_completion_is_offered() -> None:
    text = run("--help").output
    assert "--install-completion" in text and "--show-completion" in text


def test_report_prints_json_when_asked(tmp_path: Path, store_url: str) -> None:
    pytest.importorskip("matplotlib")
    res = run("report", "--out", str(tmp_path / "r"), "--db", store_url, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"page": str(tmp_path / "r" / "index.html"), "measurements": len(variety())}


def test_a_failed_export_leaves_no_partial_file_and_the_earlier_export_intact(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out.jsonl"
    assert run("db", "export", str(target), "--db", store_url).exit_code == 0
    earlier = target.read_text()

    def broken(store, out, kind=None):
        out.write('{"half": ')
        raise StoreError("the store went away mid-export")

    monkeypatch.setattr("hwtune.db.transfer.export_jsonl", broken)
    res = run("db", "export", str(target), "--db", store_url)
    assert res.exit_code == 1 and "went away" in res.output
    assert target.read_text() == earlier
    assert not [p.name for p in tmp_path.iterdir() if "partial" in p.name or p.name.startswith(".out")]


def test_export_into_a_missing_folder_is_bad_input(tmp_path: Path, store_url: str) -> None:
    res = run("db", "export", str(tmp_path / "nope" / "out.jsonl"), "--db", store_url)
    assert res.exit_code == 2 and "does not exist" in res.output and "Traceback" not in res.output


def test_one_list_style_repeat_or_comma() -> None:
    from hwtune.tuner.options import parse_backends, parse_kinds, split_list

    assert split_list(["a,b", " c ", ""]) == split_list("a, b,c") == ["a", "b", "c"]
    assert parse_kinds(["attention", "all2all"]) == parse_kinds("attention,all2all") == ["attention", "all2all"]
    assert parse_backends(["torch_sdpa", "FLEX_ATTENTION"]) == parse_backends("TORCH_SDPA,flex_attention")

    def planned(*args: str) -> dict:
        res = run("tune", "--dry-run", "--json", "--device", "cpu", "--ep", "2", *args)
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)["plan"]

    assert planned("--kinds", "attention", "--kinds", "all2all") == planned("--kinds", "attention,all2all")


def _commands():
    """Every leaf command of `hwtune`, as (words, click command)."""
    import typer.main

    def walk(command, path):
        subs = getattr(command, "commands", None)
        if not subs:
            yield path, command
            return
        for name, sub in subs.items():
            yield from walk(sub, [*path, name])

    yield from walk(typer.main.get_command(app), [])


def test_every_option_that_takes_several_values_says_repeat_or_comma_separate() -> None:
    several = [(words, p) for words, c in _commands() for p in c.params if getattr(p, "multiple", False)]
    assert len(several) >= 6  # tune --kinds/--backends/--quant-dtype, bench all2all --backend/-t/--routing
    for words, param in several:
        assert "comma-separate" in (param.help or ""), (words, param.opts)
        assert "," in (param.metavar or ""), (words, param.opts)  # the metavar shows the list style too


def test_bench_all2all_takes_tokens_and_routing_repeated_or_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    swept: list[list[tuple[int, str]]] = []

    def sweep(workloads, names, **kw):
        swept.append([(w.tokens_per_rank, w.routing) for w in workloads])
        return []

    monkeypatch.setattr("hwtune.probes.all2all.measure.measure_all2all_sweep", sweep)
    base = ["bench", "all2all", "-b", "naive", "-n", "2", "-d", "cpu"]
    run(*base, "-t", "64,128", "--routing", "uniform,skewed")
    run(*base, "-t", "64", "--tokens-per-rank", "128", "--routing", "uniform", "--routing", "skewed")
    run(*base, "-t", "64, 128,64", "--routing", "Uniform,skewed")
    expected = [(64, "uniform"), (128, "uniform"), (64, "skewed"), (128, "skewed")]
    assert swept == [expected, expected, expected]


def test_tune_quant_dtypes_repeated_or_comma_separated() -> None:
    model = str(Path(__file__).resolve().parents[1] / "data" / "models" / "deepseek-v3.json")

    def planned(*args: str) -> dict:
        res = run("tune", "--model", model, "--ep", "2", "--kinds", "all2all", "--dry-run", "--json", *args)
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)["plan"]

    both = planned("--quant-dtype", "bf16,fp8")
    assert both == planned("--quant-dtype", "bf16", "--quant-dtype", "fp8")
    assert {i["workload"]["spec"]["quant_dtype"] for i in both["items"]} == {"bf16", "fp8"}


def test_every_command_with_output_has_json() -> None:
    """`--json` wherever a command prints results; `serve` answers HTTP and prints no results."""
    without = [" ".join(words) for words, c in _commands() if not any("--json" in p.opts for p in c.params)]
    assert without == ["serve"]


@pytest.mark.parametrize(
    "args",
    [
        ["probe"],
        ["backends", "--kind", "all2all", "--device", "h100"],
        ["tune", "--dry-run", "--device", "sm90", "--kinds", "attention"],
        ["show", "--winners"],
        ["select", "attention", "--num-heads", "8", "--num-kv-heads", "2", "--head-size", "64", "--device", "sm90"],
        ["select", "all2all", "--device", "h100", "--db", "none"],
        ["db", "status"],
        ["db", "roles"],
    ],
)
def test_json_output_parses(args: list[str], store_url: str) -> None:
    res = run(*args, "--json", env={"HWTUNE_DATABASE_URL": store_url})
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) is not None
