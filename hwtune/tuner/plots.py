"""`hwtune report`: PNG plots and an HTML page of stored results, with the environment they came from.

Per environment: a table of the environment, a table of each workload's winner, and plots: decode, prefill and
mixed latency versus context for each backend (best tactic), a decode winner map over batch x context, and all2all
latency versus tokens per rank. Axes are labelled with the measured sizes (512, 2k, 32k), never with powers of ten.
matplotlib (the ``plot`` extra) with the Agg backend, so it runs on headless nodes.
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
        xs = sorted({x_of(k) for s in series.values() for k in s if panel_of(k) == panel})
        _readable_ticks(ax, xs)
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return fig


def size_label(n: float) -> str:
    """A size as people read it on an axis: 512, 2k, 32k, 1M (binary steps, as token counts and batches are)."""
    for div, suffix in ((1 << 20, "M"), (1 << 10, "k")):
        if n >= div and n % div == 0:
            return f"{int(n // div)}{suffix}"
    return f"{n:g}"


def _readable_ticks(ax: Any, xs: list[int]) -> None:
    """Ticks at the measured sizes, labelled 512, 2k, 32k; latency in plain numbers rather than powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if xs:
        step = max(1, math.ceil(len(xs) / 8))  # at most eight labels, so they never overlap
        ax.set_xticks(xs[::step], [size_label(x) for x in xs[::step]])
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 10, 20, 50, 100: labels in any range
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


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
    ax.set_xticks(range(len(contexts)), [size_label(c) for c in contexts])
    ax.set_yticks(range(len(batches)), [size_label(b) for b in batches])
    ax.set(xlabel="context (tokens)", ylabel="batch", title="decode winner (best tactic per backend)")
    return fig


def _phase_panels(per_backend: dict[str, dict[tuple, float]], phase: str, out: Path, n: int) -> list[str]:
    """The latency plot of one attention phase: a panel per batch (decode, mixed) or per chunk (prefill), up to
    four, with latency against context; plus the winner map for decode."""
    series = {b: {k: v for k, v in s.items() if k[0] == phase} for b, s in per_backend.items()}
    series = {b: s for b, s in series.items() if s}
    by = 3 if phase == "prefill" else 1  # prefill: one panel per chunk length; else per batch
    groups = sorted({k[by] for s in series.values() for k in s})
    if not groups:
        return []
    shown = groups if len(groups) <= 4 else [groups[i] for i in (0, len(groups) // 3, 2 * len(groups) // 3, -1)]
    what = "chunk" if phase == "prefill" else "batch"
    fig = _latency_panels(
        series,
        [(g,) for g in shown],
        lambda k: k[2],
        lambda k: (k[by],),
        lambda p: f"{phase}, {what} {size_label(p[0])}",
        "context (tokens)",
        "latency (us)",
    )
    imgs = [_save(fig, out, f"{phase}_latency_{n}.png")]
    if phase == "decode":
        imgs.append(
            _save(_winner_map(series, sorted({k[1] for s in series.values() for k in s})), out, f"winner_map_{n}.png")
        )
    return imgs


def _environment_images(per_backend: dict[str, dict[tuple, float]], out: Path, n: int) -> list[str]:
    """The PNGs of one environment: decode (with its winner map), prefill and mixed latency, all2all latency."""
    imgs: list[str] = []
    for phase in ("decode", "prefill", "mixed"):
        imgs += _phase_panels(per_backend, phase, out, n)
    a2a = {b: {k: v for k, v in s.items() if k[0] == "a2a"} for b, s in per_backend.items()}
    a2a = {b: s for b, s in a2a.items() if s}
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


def _cell(value: Any) -> str:
    """A table cell's text: never empty, never "None"."""
    if value is None or value == "":
        return "n/a"
    if isinstance(value, (list, tuple)):
        return ".".join(str(v) for v in value) if value else "n/a"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _winners_table(records: list[MeasurementRecord]) -> str:
    from hwtune.tuner.report import winners

    rows = [
        [
            w.label,
            f"{w.backend}/{w.tactic}",
            f"{w.median_us:.2f}",
            w.runner_up or "none (only one ok candidate)",
            f"+{w.margin:.1%}" if w.margin is not None else "n/a",
            str(w.failures),
        ]
        for w in winners(records)
    ]
    return _table(["workload", "winner", "median us", "runner-up", "margin", "failed"], rows) if rows else ""


def _section(env: str, records: list[MeasurementRecord], images: list[str]) -> str:
    """One environment's part of the page: what it is, its winners, its plots."""
    fp = records[0].environment
    dev, stack = fp.get("device", {}), fp.get("stack", {})
    env_rows = [
        [k, "unknown" if v is None else f"{v / 2**30:.0f} GiB" if k.endswith("_bytes") else v] for k, v in dev.items()
    ]
    env_rows += [[k, "not installed" if v is None else v] for k, v in stack.items()]
    return (
        f"<h2>Environment {html.escape(env)}</h2>{_table(['field', 'value'], env_rows)}"
        f"<h3>Winners ({len(records)} measurements)</h3>{_winners_table(records)}"
        + "".join(f'<p><img src="{html.escape(i)}" alt="{html.escape(i)}"></p>' for i in images)
    )


def write_report(records: list[MeasurementRecord], out_dir: str | Path, title: str = "hwtune report") -> Path:
    """Write PNG plots and ``index.html`` for ``records`` into ``out_dir``, one section per environment (so
    results of different hardware or software are never drawn as one curve); returns the page's path."""
    import matplotlib

    matplotlib.use("Agg")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    best = _best(records)
    envs = sorted({r.environment_hash for r in records})
    sections: list[str] = []
    for n, env in enumerate(envs):
        imgs = _environment_images({b: shapes for (e, b), shapes in best.items() if e == env}, out, n)
        sections.append(_section(env, [r for r in records if r.environment_hash == env], imgs))
    page = out / "index.html"
    tmp = out / ".index.html.partial"
    tmp.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;border-bottom:1px solid #ddd;"
        "text-align:left}</style>"
        f"</head><body><h1>{html.escape(title)}</h1><p>{len(records)} measurements, {len(envs)} environment(s).</p>"
        + "".join(sections)
        + "</body></html>"
    )
    tmp.replace(page)  # a reader never sees half a page
    return page
