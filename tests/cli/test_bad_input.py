"""Bad input from a newcomer's first hour: each gets a clear message, exit 2, no traceback, and loses nothing."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.db.store import Store
from tests.db.helpers import variety

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def refused(res, *words: str) -> None:
    """Exit 2, every word in the output, and no traceback."""
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    for word in words:
        assert word in res.output, f"{word!r} not in {res.output!r}"


@pytest.fixture()
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'results.db'}"
    with Store.open(url) as store:
        store.write(variety())
    return url


# --- config.json ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [("num_attention_heads", "thirty-two"), ("num_key_value_heads", 2.5), ("head_dim", [128]), ("hidden_size", -1)],
)
def test_a_config_json_with_a_non_numeric_shape_field(tmp_path: Path, field: str, value: object) -> None:
    cfg = json.loads((MODELS / "llama-3.1-8b.json").read_text())
    cfg[field] = value
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps(cfg))
    for args in (["select", "attention", "--model", str(bad)], ["tune", "--model", str(bad), "--dry-run"]):
        refused(run(*args), f"config.json field {field} is {json.dumps(value)}", "not a whole number", str(bad))


# --- sizes and ranges ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, option",
    [
        (["tune", "--dry-run", "--timeout", "0"], "--timeout"),
        (["tune", "--dry-run", "--timeout", "-5"], "--timeout"),
        (["tune", "--dry-run", "--max-num-seqs", "0"], "--max-num-seqs"),
        (["tune", "--dry-run", "--tp", "0"], "--tp"),
        (["tune", "--dry-run", "--block-size", "0"], "--block-size"),
        (["tune", "--dry-run", "--budget", "0"], "--budget"),
        (["tune", "--dry-run", "--lease", "1"], "--lease"),
        (["select", "attention", "--num-heads", "0", "--num-kv-heads", "1", "--head-size", "64"], "--num-heads"),
        (["select", "attention", "--max-num-seqs", "-1"], "--max-num-seqs"),
        (
            ["select", "all2all", "--ep-size", "0", "--num-experts", "8", "--topk", "2", "--hidden-size", "64"],
            "--ep-size",
        ),
        (["bench", "attention", "--backend", "TORCH_SDPA", "--batch", "0"], "--batch"),
        (["show", "--limit", "0"], "--limit"),
    ],
)
def test_zero_or_negative_sizes_are_refused_before_anything_runs(args: list[str], option: str) -> None:
    refused(run(*args), option, "Invalid value")


def test_ranges_and_choices_show_in_help() -> None:
    tune_help = run("tune", "--help").output
    assert "x>=1" in tune_help  # --timeout, --max-num-seqs, --tp ...
    show_help = run("show", "--help").output
    assert "decode" in show_help and "prefill" in show_help and "mixed" in show_help


# --- choices: declared on the option, listed in --help, a bad value is click's usage error -----------------------

HEADS = ["--num-heads", "8", "--num-kv-heads", "2", "--head-size", "64"]
A2A = ["bench", "all2all", "--backend", "naive", "--world-size", "2", "--device", "cpu"]


def unboxed(text: str) -> str:
    """Text with typer's panel borders removed and its wrapped lines joined."""
    return " ".join(" ".join(line.strip().strip("│╭╮╰╯─").split()) for line in text.splitlines()).strip()


def usage_error(res, option: str, *words: str) -> None:
    """Exit 2 as click's usage error about ``option`` (checked before the command runs), naming ``words``."""
    refused(res)
    text = unboxed(res.output)
    assert f"Invalid value for '{option}'" in text, text
    for word in words:
        assert word in text, f"{word!r} not in {text!r}"


@pytest.mark.parametrize(
    "args, option, words",
    [
        (["select", "attention", *HEADS, "--kv-layout", "NDH"], "--kv-layout", ["auto", "NHD", "HND"]),
        (["bench", "attention", "-b", "TORCH_SDPA", *HEADS, "--kv-layout", "x"], "--kv-layout", ["NHD"]),
        (["tune", "--dry-run", "--kv-layout", "x"], "--kv-layout", ["HND"]),
        (["select", "attention", *HEADS, "--kv-cache-dtype", "fp9"], "--kv-cache-dtype", ["turboquant_k8v4"]),
        (["bench", "attention", "-b", "TORCH_SDPA", *HEADS, "--kv-cache-dtype", "fp9"], "--kv-cache-dtype", []),
        (["tune", "--dry-run", "--kv-cache-dtype", "fp9"], "--kv-cache-dtype", ["fp8_e5m2"]),
        (["select", "attention", *HEADS, "--dtype", "int7"], "--dtype", ["bfloat16"]),
        (["bench", "attention", "-b", "TORCH_SDPA", *HEADS, "--phase", "decoding"], "--phase", ["prefill"]),
        (["bench", "attention", "-b", "TORCH_SDPA", *HEADS, "--device", "tpu"], "--device", ["cuda"]),
        (["db", "export", "-", "--kind", "moe"], "--kind", ["attention", "all2all"]),
        (["backends", "--kind", "moe"], "--kind' / '-k", ["all2all"]),
        (["backends", "--device", "sm42"], "--device' / '-d", ["h100"]),
        (["tune", "--dry-run", "--kinds", "attention,moe"], "--kinds", ["all2all"]),
        (["tune", "--dry-run", "--device", "sm42"], "--device' / '-d", ["sm100"]),
        ([*A2A, "--routing", "uniform,zipf"], "--routing", ["skewed"]),
        ([*A2A, "--tokens-per-rank", "64,0"], "--tokens-per-rank' / '-t", ["'0'"]),
        ([*A2A, "--quant-dtype", "int3"], "--quant-dtype", ["mxfp8"]),
    ],
)
def test_a_value_outside_an_options_choices_is_a_usage_error(args: list[str], option: str, words: list[str]) -> None:
    usage_error(run(*args), option, *words)


def test_tune_quant_dtype_is_listed_in_help_and_checked_by_the_library() -> None:
    assert "<bf16|fp16|fp8|mxfp4|mxfp8|nvfp4>,..." in unboxed(
        CliRunner().invoke(app, ["tune", "--help"], env={"COLUMNS": "400"}).output
    )
    refused(
        run("tune", "--dry-run", "--quant-dtype", "bf16,int3"), "--quant-dtype takes the activation dtypes", "nvfp4"
    )


def test_choices_accept_what_the_library_accepts() -> None:
    """The kv-cache dtype check is the library's: an engine's own name (vLLM's turboquant_k8v4) and an alias
    (fp8) pass; choices match regardless of case and take the library's spelling (nhd -> NHD)."""
    for dtype in ("turboquant_k8v4", "fp8", "FP8_E5M2", "bf16"):
        res = run("select", "attention", *HEADS, "--kv-cache-dtype", dtype, "--device", "sm90", "--json")
        assert "Invalid value" not in res.output, res.output
    model = str(MODELS / "llama-3.1-8b.json")
    res = run(
        "tune", "--model", model, "--dry-run", "--json", "--device", "cpu", "--kinds", "attention", "--kv-layout", "hnd"
    )
    assert res.exit_code == 0, res.output
    layouts = {i["workload"]["spec"]["kv_layout"] for i in json.loads(res.stdout)["plan"]["items"]}
    assert layouts == {"HND"}


def test_choices_are_listed_in_help_from_the_library() -> None:
    from hwtune.core.catalogue.engines.snapshot import known_kv_cache_dtypes
    from hwtune.core.devices import simulated_names

    wide = {"COLUMNS": "400"}
    select_help = unboxed(CliRunner().invoke(app, ["select", "attention", "--help"], env=wide).output)
    assert "<auto|NHD|HND>" in select_help
    assert all(name in select_help for name in known_kv_cache_dtypes() | {"turboquant_4bit", "turboquant_8bit"})
    assert all(name in select_help for name in simulated_names())
    for command, shown in [
        (["bench", "attention"], ["<decode|prefill|mixed>", "<auto|cuda|cpu>", "<auto|NHD|HND>"]),
        (["bench", "all2all"], ["<uniform|skewed>,...", "N[,N...]", "<bf16|fp16|fp8|mxfp4|mxfp8|nvfp4>"]),
        (["tune"], ["<attention|all2all>,...", "<auto|NHD|HND>", "<auto|cuda|cpu|DEVICE>"]),
        (["db", "export"], ["<attention|all2all>"]),
        (["backends"], ["<attention|all2all>"]),
    ]:
        text = unboxed(CliRunner().invoke(app, [*command, "--help"], env=wide).output)
        assert all(s in text for s in shown), (command, text)


def test_timeout_is_checked_by_the_library_too() -> None:
    from hwtune.core.errors import InvalidSpecError
    from hwtune.tuner.options import TuneOptions

    with pytest.raises(InvalidSpecError, match="--timeout must be a positive number of seconds"):
        TuneOptions(timeout_s=0).check()


# --- show and report -----------------------------------------------------------------------------------------


def test_show_phase_takes_only_a_phase(store_url: str) -> None:
    refused(run("show", "--phase", "nonsense", "--db", store_url), "--phase", "decode", "prefill", "mixed")
    ok = run("show", "--phase", "prefill", "--db", store_url, "--json")
    assert ok.exit_code == 0 and {r["workload"]["phase"] for r in json.loads(ok.stdout)} == {"prefill"}


def test_report_out_that_is_a_file(tmp_path: Path, store_url: str) -> None:
    out = tmp_path / "report"
    out.write_text("my notes")
    refused(run("report", "--out", str(out), "--db", store_url), "is a file, not a folder")
    assert out.read_text() == "my notes"  # nothing lost


def test_report_out_with_an_earlier_report(tmp_path: Path, store_url: str) -> None:
    out = tmp_path / "report"
    out.mkdir()
    (out / "index.html").write_text("earlier")
    refused(run("report", "--out", str(out), "--db", store_url), "already holds a report", "--overwrite")
    assert (out / "index.html").read_text() == "earlier"  # nothing lost
    replaced = run("report", "--out", str(out), "--db", store_url, "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert (out / "index.html").read_text() != "earlier"


# --- the store -----------------------------------------------------------------------------------------------


def test_a_read_only_store_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root ignores file modes, so the permission check is what is exercised: it must refuse before SQLite says
    'unable to open database file'."""
    path = tmp_path / "ro.db"
    Store.open(str(path)).close()
    real_access = __import__("os").access
    monkeypatch.setattr(
        "hwtune.db.engine.os.access", lambda p, mode: False if Path(p) == path else real_access(p, mode)
    )
    res = run("tune", "--quick", "--kinds", "attention", "--db", str(path))
    refused(res, "is read-only for this user", f"chmod u+w {path}", "--db")


def test_a_read_only_store_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    real_access = __import__("os").access
    monkeypatch.setattr(
        "hwtune.db.engine.os.access", lambda p, mode: False if Path(p) == folder else real_access(p, mode)
    )
    refused(run("db", "upgrade", "--db", str(folder / "x.db")), f"the folder {folder} is read-only")


def test_a_folder_given_as_the_store(tmp_path: Path) -> None:
    refused(run("db", "upgrade", "--db", str(tmp_path)), "is a folder; name a file in it")


def test_a_store_in_a_missing_folder_is_created_with_a_notice(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Decided (docs/store.md): the folder is created, and a warning names it, so a typo is visible."""
    path = tmp_path / "no" / "such" / "dir" / "x.db"
    with caplog.at_level(logging.WARNING, logger="hwtune"):
        Store.open(f"sqlite:///{path}").close()
    assert path.exists()
    assert any(f"created the folder {path.parent}" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///a%20b.db",
        "sqlite:///sub/a%20b.db?mode=rwc",
        "sqlite:///a b.db",
        "sqlite+pysqlite:///a%3Fb.db",
        "a b.db",
        "sqlite:///~/x%20y.db",
    ],
)
def test_the_light_read_path_and_sqlalchemy_resolve_one_file(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hwtune.db.sqlite_direct import sqlite_file
    from hwtune.db.urls import resolve, sqlite_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert sqlite_file(url) == sqlite_path(resolve(url))


def test_an_engine_reads_the_store_that_tune_wrote_at_a_percent_encoded_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sqlite:///a%20b.db` once made the light reader open another file and fall back to static priorities."""
    from hwtune.db.sqlite_direct import read_for_selection
    from tests.db.helpers import SPEC

    monkeypatch.chdir(tmp_path)
    url = "sqlite:///a%20b.db"
    with Store.open(url) as store:
        store.write(variety())
    rows, _fps, notes = read_for_selection(url, SPEC.key(), "attention")
    assert rows, notes
    assert notes == [f"using configured store {tmp_path / 'a b.db'}"]


def test_backends_markdown_and_json_together_are_refused() -> None:
    res = CliRunner().invoke(app, ["backends", "--markdown", "--json"])
    assert res.exit_code == 2 and "give one" in res.output
