"""`hwtune report` from a small store: every phase and all2all drawn, every linked image there and non-empty, every
table cell with a value (no "None"), tick labels people read (2k, not 10^3)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.core.devices import CPU_PROFILE
from hwtune.core.environment import Environment, SoftwareStack
from hwtune.core.types import AttentionWorkload
from hwtune.db.store import Store
from tests.db.helpers import SPEC, all2all, attention

pytest.importorskip("matplotlib", reason="hwtune report needs matplotlib (the plot extra)")

#: A CPU node without CUDA, triton or flashinfer: its fingerprint has None fields, which the page must not print.
CPU_ENV = Environment(CPU_PROFILE, SoftwareStack("2.13.0+cpu", None, None, None, None, None, "0.1.0"))


def _mixed(batch: int, backend: str, median: float, seq: int):
    wl = AttentionWorkload(SPEC, "mixed", batch, 4096, query_len=512, num_prefill=1)
    return attention(backend=backend, median=median, seq=seq, workload=wl.to_dict(), workload_key=wl.key())


def _records() -> list:
    out, seq = [], 0
    for backend, scale in (("FLASH_ATTN", 1.0), ("FLASHINFER", 1.2)):
        for batch in (1, 8, 64):
            for context in (512, 2048, 32768):
                out.append(
                    attention(backend=backend, batch=batch, context=context, median=scale * context / 64, seq=seq)
                )
                seq += 1
        for context in (1024, 8192):
            out.append(
                attention(backend=backend, phase="prefill", batch=1, context=context, median=scale * 90, seq=seq)
            )
            seq += 1
        out.append(_mixed(32, backend, 150 * scale, seq))
        seq += 1
    out.append(attention(backend="TRITON_ATTN", tactic="auto", status="crashed", seq=seq))
    out += [all2all(tokens=t, backend=b) for t in (1, 128, 1024) for b in ("naive", "allgather_reducescatter")]
    out.append(attention(env=CPU_ENV, backend="TORCH_SDPA", tactic="math", seq=seq + 1, host="cpu-node"))
    return out


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.cells: list[str] = []
        self._in_cell = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag in ("td", "th"):
            self._in_cell = True
            self.cells.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data: str) -> None:
        if self._in_cell:
            self.cells[-1] += data


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    url = f"sqlite:///{tmp / 'results.db'}"
    with Store.open(url) as store:
        store.write(_records())
    out = tmp / "out"
    res = CliRunner().invoke(app, ["report", "--out", str(out), "--db", url])
    assert res.exit_code == 0, res.output
    return out


def test_every_linked_image_exists_and_every_cell_has_a_value(report_dir: Path) -> None:
    text = (report_dir / "index.html").read_text()
    page = _Page()
    page.feed(text)
    assert page.images and page.cells
    for src in page.images:
        png = report_dir / src
        assert png.is_file() and png.stat().st_size > 1000, src
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", src
    empty = [i for i, c in enumerate(page.cells) if not c.strip() or c.strip() == "None"]
    assert not empty, [page.cells[i - 1 : i + 1] for i in empty]
    assert "None" not in text
    assert not list(report_dir.glob("*.partial"))


def test_the_report_shows_every_phase_and_all2all(report_dir: Path) -> None:
    images = {p.name.rsplit("_", 1)[0] for p in report_dir.glob("*.png")}
    assert {"decode_latency", "winner_map", "prefill_latency", "mixed_latency", "all2all_latency"} <= images
    text = (report_dir / "index.html").read_text()
    assert "Winners" in text and "FLASH_ATTN/fa3" in text and "mixed b32" in text


def test_tick_labels_are_sizes_people_read() -> None:
    from hwtune.tuner.plots import size_label

    assert [size_label(n) for n in (1, 512, 2048, 32768, 1 << 20, 1000)] == ["1", "512", "2k", "32k", "1M", "1000"]


def test_a_long_flashinfer_jit_says_how_to_skip_it_next_time() -> None:
    from hwtune.tuner.report import jit_cache_hint

    long = {"FLASHINFER/fa3": 114.0, "FLASHINFER/fa2": 27.0, "HWTUNE_TRITON_ATTN/tuned": 48.0}
    hint = jit_cache_hint(long, "0.6.18.post1", jit_cache_installed=False, cuda="13.0")
    assert hint and "141 s" in hint
    assert "flashinfer-jit-cache==0.6.18.post1 --index-url https://flashinfer.ai/whl/cu130" in hint
    assert jit_cache_hint(long, "0.6.18.post1", jit_cache_installed=True, cuda="13.0") is None
    assert jit_cache_hint({"FLASHINFER/xqa": 20.0, "HWTUNE_TRITON_ATTN/tuned": 90.0}, "0.6.18", False, "13.0") is None
