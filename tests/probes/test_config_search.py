"""The ``tuned`` tactics' config search (``candidates/config_search.py``), on the CPU with the GPU parts stood in:
a config that fails to compile, computes something else or cannot be captured is listed and never timed; the rest
are timed through a captured graph (the probe's own timing), and the fastest by that timing wins."""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from hwtune.core.records import LatencyStats
from hwtune.probes.attention.candidates import config_search


@dataclass(frozen=True)
class Cfg:
    label: str
    us: float  # what the stand-in graph timing measures for it
    fails: str = ""  # "compile", "wrong", "capture"
    screen_us: float = 0.0  # what the screen's few replays measure, when it differs from ``us``

    def name(self) -> str:
        return self.label


@pytest.fixture
def timed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stand-ins for the GPU: graphs capture a config's call, timing reads the config's ``us``; returns the names
    of the configs timed, in order."""
    seen: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a, **k: SimpleNamespace(L2_cache_size=1 << 20))

    def capture(fn):  # noqa: ANN001, ANN202
        fn()
        if CURRENT["cfg"].fails == "capture":
            raise RuntimeError("operation not permitted when stream is capturing")
        return SimpleNamespace(cfg=CURRENT["cfg"], out=weakref.ref(CURRENT["out"]))

    def time_cuda(fn, *, l2_bytes, opts, graph):  # noqa: ANN001, ANN202
        assert graph is not None and l2_bytes == 1 << 20
        # a replay writes where the captured call wrote: that tensor must still be alive (a freed one is reused)
        assert graph.out() is not None, f"{graph.cfg.name()}'s graph replays into a freed output"
        assert opts in (config_search.SCREEN_TIMING, config_search.SEARCH_TIMING)
        screen = opts is config_search.SCREEN_TIMING
        seen.append(("screen " if screen else "") + graph.cfg.name())
        us = graph.cfg.screen_us if screen and graph.cfg.screen_us else graph.cfg.us
        return LatencyStats(median_us=us, p10_us=us, p90_us=us, mean_us=us, n=10, spread=0.0), "cuda_graph"

    monkeypatch.setattr(config_search, "capture_graph", capture)
    monkeypatch.setattr(config_search, "time_cuda", time_cuda)
    return seen


CURRENT: dict[str, object] = {}


def _call(cfg: Cfg, out: torch.Tensor) -> None:
    CURRENT["cfg"], CURRENT["out"] = cfg, out
    if cfg.fails == "compile":
        raise RuntimeError("out of resource: shared memory")
    if cfg.fails == "nothing":  # a launch that does not write its output: what the tensor held must not pass
        return
    out.fill_(2.0 if cfg.fails == "wrong" else 1.0)


def test_the_fastest_correct_capturable_config_wins_by_graph_timing(timed: list[str]) -> None:
    space = [
        Cfg("auto", 20.0),
        Cfg("fast-but-wrong", 5.0, "wrong"),
        Cfg("no-compile", 4.0, "compile"),
        Cfg("no-capture", 3.0, "capture"),
        Cfg("writes-nothing", 2.0, "nothing"),
        Cfg("faster", 12.0),
        Cfg("slower", 30.0),
    ]
    best, seen = config_search.fastest_config(space, _call, torch.zeros(4))
    assert best.name() == "faster"
    assert [t for t in timed if t.startswith("screen ")] == ["screen auto", "screen faster", "screen slower"]
    assert seen["searched"] == 7 and seen["searched_us"] == {"auto": 20.0, "faster": 12.0, "slower": 30.0}
    rejected = " | ".join(seen["rejected_configs"])
    assert "fast-but-wrong: output differs" in rejected and "no-compile: RuntimeError" in rejected
    assert "no-capture: not capturable" in rejected and "writes-nothing: output differs" in rejected


def test_auto_is_kept_when_nothing_beats_it(timed: list[str]) -> None:
    best, _ = config_search.fastest_config([Cfg("auto", 10.0), Cfg("b", 10.5), Cfg("c", 11.0)], _call, torch.zeros(2))
    assert best.name() == "auto"


def test_the_screen_picks_finalists_and_the_finalists_timing_decides(timed: list[str]) -> None:
    """Every correct config is screened; auto and the FINALISTS fastest of the screen are timed again, and that
    timing decides: a config the screen flattered loses, one well behind in the screen is not timed again."""
    n = config_search.FINALISTS
    flattered = Cfg("flattered", 15.0, screen_us=9.0)
    rest = [Cfg(f"c{i}", 10.0 + i) for i in range(n + 2)]
    best, seen = config_search.fastest_config([Cfg("auto", 20.0), flattered, *rest], _call, torch.zeros(2))
    assert best.name() == "c0"
    finalists = [t for t in timed if not t.startswith("screen ")]
    assert finalists == ["auto", "flattered", *(c.name() for c in rest[: n - 1])]
    assert len(seen["screened_us"]) == n + 4 and seen["screened_us"]["flattered"] == 9.0


def _searched_lse(runner, search, monkeypatch: pytest.MonkeyPatch) -> list:  # noqa: ANN001
    """The ``lse`` argument of every kernel call ``runner``'s search made (``search()`` runs it)."""
    got: list = []
    monkeypatch.setattr(runner, "_call", lambda p, cfg, out, lse, *ws: got.append(lse))

    def fastest(space, call, like):  # noqa: ANN001, ANN202 - config_search.fastest_config with the GPU stood in
        for cfg in space[:2]:
            call(cfg, like)
        return space[0], {}

    monkeypatch.setattr(config_search, "fastest_config", fastest)
    search()
    return got


def test_the_attention_search_launches_what_the_run_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search must time the kernel variant run() runs: an LSE left out (a constexpr of the kernel) timed another
    compiled variant, 10-12 % faster than the run then was at one-split decode configs (H100, 2026-11-27)."""
    pytest.importorskip("triton")
    from hwtune.probes.attention.candidates.triton_attn import TritonAttnRunner

    runner = TritonAttnRunner("tuned")
    runner.out, runner.lse = torch.zeros(4, 8, 64), torch.zeros(4, 8)
    p = SimpleNamespace(q=torch.zeros(4, 8, 64))
    shape = dict(phase="decode", batch=4, max_query_len=1, max_seq_len=3000, head_size=64, gqa_group=4,
                 num_sms=132, num_kv_heads=2, kv_cache_bytes=2)  # fmt: skip
    monkeypatch.setattr(runner, "_shape_args", lambda _p: shape)
    got = _searched_lse(runner, lambda: runner._search(p), monkeypatch)
    assert len(got) == 2 and all(lse is runner.lse for lse in got)


def test_the_mla_search_launches_what_the_run_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    from hwtune.kernels.triton_mla import default_mla_config
    from hwtune.probes.attention.candidates.mla_triton import TritonMlaRunner

    runner = TritonMlaRunner("tuned")
    runner.out, runner.lse = torch.zeros(4, 16, 512), torch.zeros(4, 16)
    p = SimpleNamespace(q=torch.zeros(4, 16, 576), num_tokens=4, spec=SimpleNamespace(num_heads=16),
                        dims=SimpleNamespace(lora=512))  # fmt: skip
    cfg = default_mla_config(num_heads=16, max_query_len=1, batch=4, max_seq_len=3000, sms=132)
    got = _searched_lse(runner, lambda: runner._search(p, [cfg, cfg]), monkeypatch)
    assert len(got) == 2 and all(lse is runner.lse for lse in got)


def test_a_short_prefill_chunk_search_refines_its_two_fastest_tiles_kv_splits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A prefill whose query tiles fill few SMs gets a second round: auto (the reference) and the first round's
    winner, then the fastest configs of two distinct tiles with other KV split counts
    (``configs.prefill_split_refinements``), none twice and none the first round searched; the second round's fastest
    is run. A decode, and a prefill whose tiles fill the SMs, get none."""
    pytest.importorskip("triton")
    from hwtune.kernels import configs
    from hwtune.probes.attention.candidates.triton_attn import TritonAttnRunner

    rounds: list[list] = []

    def fastest(space, call, like):  # noqa: ANN001, ANN202 - config_search.fastest_config with the GPU stood in
        rounds.append(list(space))
        if len(rounds) > 1:
            return space[2], {"searched_us": {c.name(): 1.0 for c in space}, "rejected_configs": ["x: refused"]}
        # auto's tile with more splits fastest, then auto itself (the same tile), then another tile
        same_tile = [c for c in space[1:] if dataclasses.replace(c, num_splits=space[0].num_splits) == space[0]]
        other = space[5]
        timed = {c.name(): 4.0 for c in same_tile[:1]} | {space[0].name(): 5.0, other.name(): 6.0}
        return other, {"searched": len(space), "screened_us": {}, "searched_us": timed, "rejected_configs": []}

    monkeypatch.setattr(config_search, "fastest_config", fastest)
    runner = TritonAttnRunner("tuned")
    runner.out, runner.lse = torch.zeros(96, 32, 128), torch.zeros(96, 32)
    p = SimpleNamespace(q=torch.zeros(96, 32, 128))
    shape = dict(phase="prefill", batch=1, max_query_len=96, max_seq_len=6096, head_size=128, gqa_group=4,
                 num_sms=132, num_kv_heads=8, kv_cache_bytes=2)  # fmt: skip
    monkeypatch.setattr(runner, "_shape_args", lambda _p: shape)
    best = runner._search(p)
    first, second = rounds
    auto, other = first[0], first[5]
    more_splits = next(c for c in first[1:] if dataclasses.replace(c, num_splits=auto.num_splits) == auto)
    tiles = {k: v for k, v in shape.items() if k not in ("phase", "head_size", "kv_cache_bytes")}
    want = configs.prefill_split_refinements(more_splits, **tiles) + configs.prefill_split_refinements(other, **tiles)
    want = [c for c in dict.fromkeys(want) if c not in first]
    assert want and second == [auto, other, *want]
    assert len(set(second)) == len(second)
    assert best == second[2]
    assert runner.extra["searched"] == len(first) + len(want) and runner.extra["rejected_configs"] == ["x: refused"]

    for other_shape in (
        dict(shape, phase="decode", max_query_len=1),
        dict(shape, max_query_len=4096, max_seq_len=8192),
    ):
        rounds.clear()
        monkeypatch.setattr(runner, "_shape_args", lambda _p, s=other_shape: s)
        runner._search(SimpleNamespace(q=torch.zeros(4, 32, 128)))
        assert len(rounds) == 1
