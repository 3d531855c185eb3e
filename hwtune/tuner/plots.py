"""`hwtune report`: PNG plots and an HTML page of stored results, with the environment they came from.

Plots: decode latency versus context for each backend (best tactic) at several batch sizes; a winner map
over batch x context; all2all latency versus tokens per rank. matplotlib (the ``plot`` extra) with the Agg
backend, so it runs on headless nodes.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable

from hwtune.core.records import MeasurementRecord


def _best(records: Iterable[MeasurementRecord]) -> dict[tuple[str, str], dict[tuple, float]]:
    """(environment hash, backend) -> {shape: best median over tactics}."""
    out: dict[tuple[str, str], dict[tuple, float]] = defaultdict(dict)
    for r in records:
        if not r.ok or r.stats is None:
            continue
        w = r.workload
        shape = (
            ("a2a", w["spec"]["ep_size"], w["spec"]["quant_dtype"], w["spec"]["hidden_size"], w["tokens_per_rank"])
            if r.kind == "all2all"
            else (w["phase"], w["batch"], w["context_len"], w["query_len"])
        )
        cur = out[(r.environment_hash, r.backend)].get(shape)
        if cur is None or r.stats.median_us < cur:
            out[(r.environment_hash, r.backend)][shape] = r.stats.median_us
    return out


def _save(fig: Any, out: Path, name: str) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def _latency_panels(
    series: dict[str, dict[tuple, float]],
    panels: list[tuple],
    x_of: Callable[[tuple], int],
    panel_of: Callable[[tuple], tuple],
    title: Callable[[tuple], str],
    xlabel: str,
    ylabel: str,
) -> Any:
    """One log-log panel per ``panels`` entry: latency against ``x_of(shape)`` for each backend."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for backend, s in sorted(series.items()):
            pts = sorted((x_of(k), v) for k, v in s.items() if panel_of(k) == panel)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=backend)
        ax.set(xscale="log", yscale="log", title=title(panel), xlabel=xlabel, ylabel=ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return fig


def _winner_map(decode: dict[str, dict[tuple, float]], batches: list[int]) -> Any:
    """Which backend is fastest at each (batch, context) of decode."""
    import matplotlib.pyplot as plt

    contexts = sorted({k[2] for s in decode.values() for k in s})
    names = sorted(decode)
    grid = [[math.nan] * len(contexts) for _ in batches]
    labels = [[""] * len(contexts) for _ in batches]
    for i, b in enumerate(batches):
        for j, c in enumerate(contexts):
            cands = [(s[k], bk) for bk, s in decode.items() for k in s if k[1] == b and k[2] == c]
            if cands:
                _, bk = min(cands)
                grid[i][j] = names.index(bk)
                labels[i][j] = bk
    fig, ax = plt.subplots(figsize=(1.4 * len(contexts) + 2, 0.6 * len(batches) + 1.5))
    ax.imshow(grid, cmap="tab10", vmin=0, vmax=9, aspect="auto")
    for i in range(len(batches)):
        for j in range(len(contexts)):
            ax.text(j, i, labels[i][j], ha="center", va="center", fontsize=6)
    ax.set_xticks(range(len(contexts)), [str(c) for c in contexts])
    ax.set_yticks(range(len(batches)), [str(b) for b in batches])
    ax.set(xlabel="context (tokens)", ylabel="batch", title="decode winner (best tactic per backend)")
    return fig


def _environment_images(per_backend: dict[str, dict[tuple, float]], out: Path, n: int) -> list[str]:
    """The PNGs of one environment: decode latency, the decode winner map, all2all latency."""
    imgs: list[str] = []
    decode = {b: {k: v for k, v in s.items() if k[0] == "decode"} for b, s in per_backend.items()}
    batches = sorted({k[1] for s in decode.values() for k in s})
    if batches:
        shown = (
            batches if len(batches) <= 4 else [batches[i] for i in (0, len(batches) // 3, 2 * len(batches) // 3, -1)]
        )
        fig = _latency_panels(
            decode,
            [(b,) for b in shown],
            lambda k: k[2],
            lambda k: (k[1],),
            lambda p: f"decode, batch {p[0]}",
            "context (tokens)",
            "latency (us)",
        )
        imgs.append(_save(fig, out, f"decode_latency_{n}.png"))
        imgs.append(_save(_winner_map(decode, batches), out, f"winner_map_{n}.png"))
    a2a = {b: {k: v for k, v in s.items() if k[0] == "a2a"} for b, s in per_backend.items()}
    groups = sorted({k[1:4] for s in a2a.values() for k in s})
    if groups:
        fig = _latency_panels(
            a2a,
            groups,
            lambda k: k[4],
            lambda k: k[1:4],
            lambda g: f"all2all EP{g[0]} {g[1]} hidden {g[2]}",
            "tokens per rank",
            "dispatch+combine (us)",
        )
        imgs.append(_save(fig, out, f"all2all_latency_{n}.png"))
    return imgs


def write_report(records: list[MeasurementRecord], out_dir: str | Path, title: str = "hwtune report") -> Path:
    """Write PNG plots and ``index.html`` for ``records`` into ``out_dir``, one section per environment (so
    results of different hardware or software are never drawn as one curve); returns the page's path."""
    import matplotlib

    matplotlib.use("Agg")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    best = _best(records)
    envs = sorted({e for e, _ in best})
    sections: list[str] = []
    for n, env in enumerate(envs):
        fp = next(r.environment for r in records if r.environment_hash == env)
        imgs = _environment_images({b: shapes for (e, b), shapes in best.items() if e == env}, out, n)
        dev, stack = fp.get("device", {}), fp.get("stack", {})
        env_rows = "".join(
            f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>"
            for k, v in {**dev, **stack}.items()
        )
        sections.append(
            f"<h2>Environment {env}</h2><table>{env_rows}</table>"
            + "".join(f'<p><img src="{i}" alt="{i}"></p>' for i in imgs)
        )
    page = out / "index.html"
    page.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}td{padding:2px 8px;border-bottom:1px solid #ddd}</style>"
        f"</head><body><h1>{html.escape(title)}</h1><p>{len(records)} measurements, {len(envs)} environment(s).</p>"
        + "".join(sections)
        + "</body></html>"
    )
    return page
