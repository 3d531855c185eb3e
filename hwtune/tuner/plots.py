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
from typing import Iterable

from hwtune.core.records import MeasurementRecord


def _best(records: Iterable[MeasurementRecord]) -> dict[tuple[str, str], dict[tuple, float]]:
    """(environment hash, backend) -> {shape: best median over tactics}."""
    out: dict[tuple[str, str], dict[tuple, float]] = defaultdict(dict)
    for r in records:
        if not r.ok or r.stats is None:
            continue
        w = r.workload
        shape = (("a2a", w["spec"]["ep_size"], w["spec"]["quant_dtype"], w["spec"]["hidden_size"], w["tokens_per_rank"])
                 if r.kind == "all2all" else (w["phase"], w["batch"], w["context_len"], w["query_len"]))
        cur = out[(r.environment_hash, r.backend)].get(shape)
        if cur is None or r.stats.median_us < cur:
            out[(r.environment_hash, r.backend)][shape] = r.stats.median_us
    return out


def write_report(records: list[MeasurementRecord], out_dir: str | Path, title: str = "hwtune report") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    best = _best(records)
    envs = sorted({e for e, _ in best})
    sections: list[str] = []
    for n, env in enumerate(envs):
        fp = next(r.environment for r in records if r.environment_hash == env)
        per_backend = {b: shapes for (e, b), shapes in best.items() if e == env}
        imgs: list[str] = []
        decode = {b: {k: v for k, v in s.items() if k[0] == "decode"} for b, s in per_backend.items()}
        batches = sorted({k[1] for s in decode.values() for k in s})
        if batches:
            shown = batches if len(batches) <= 4 else [batches[i] for i in (0, len(batches) // 3, 2 * len(batches) // 3, -1)]
            fig, axes = plt.subplots(1, len(shown), figsize=(4.5 * len(shown), 3.8), squeeze=False)
            for ax, b in zip(axes[0], shown):
                for backend, s in sorted(decode.items()):
                    pts = sorted((k[2], v) for k, v in s.items() if k[1] == b)
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=backend)
                ax.set(xscale="log", yscale="log", title=f"decode, batch {b}", xlabel="context (tokens)",
                       ylabel="latency (us)")
                ax.grid(True, which="both", alpha=0.3)
            axes[0][0].legend(fontsize=7)
            fig.tight_layout()
            name = f"decode_latency_{n}.png"
            fig.savefig(out / name, dpi=110)
            plt.close(fig)
            imgs.append(name)
            # winner map over batch x context
            contexts = sorted({k[2] for s in decode.values() for k in s})
            names = sorted(decode)
            grid = [[math.nan] * len(contexts) for _ in batches]
            labels = [[""] * len(contexts) for _ in batches]
            for i, b in enumerate(batches):
                for j, c in enumerate(contexts):
                    cands = [(s[k], bk) for bk, s in decode.items() for k in s if k[1] == b and k[2] == c]
                    if cands:
                        lat, bk = min(cands)
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
            fig.tight_layout()
            name = f"winner_map_{n}.png"
            fig.savefig(out / name, dpi=110)
            plt.close(fig)
            imgs.append(name)
        a2a = {b: {k: v for k, v in s.items() if k[0] == "a2a"} for b, s in per_backend.items()}
        groups = sorted({k[1:4] for s in a2a.values() for k in s})
        if groups:
            fig, axes = plt.subplots(1, len(groups), figsize=(4.5 * len(groups), 3.8), squeeze=False)
            for ax, g in zip(axes[0], groups):
                for backend, s in sorted(a2a.items()):
                    pts = sorted((k[4], v) for k, v in s.items() if k[1:4] == g)
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=backend)
                ax.set(xscale="log", yscale="log", title=f"all2all EP{g[0]} {g[1]} hidden {g[2]}",
                       xlabel="tokens per rank", ylabel="dispatch+combine (us)")
                ax.grid(True, which="both", alpha=0.3)
            axes[0][0].legend(fontsize=7)
            fig.tight_layout()
            name = f"all2all_latency_{n}.png"
            fig.savefig(out / name, dpi=110)
            plt.close(fig)
            imgs.append(name)
        dev, stack = fp.get("device", {}), fp.get("stack", {})
        env_rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>"
                           for k, v in {**dev, **stack}.items())
        sections.append(
            f"<h2>Environment {env}</h2><table>{env_rows}</table>"
            + "".join(f'<p><img src="{i}" alt="{i}"></p>' for i in imgs)
        )
    page = out / "index.html"
    page.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}td{padding:2px 8px;border-bottom:1px solid #ddd}</style>"
        f"</head><body><h1>{html.escape(title)}</h1><p>{len(records)} measurements, {len(envs)} environment(s).</p>"
        + "".join(sections) + "</body></html>"
    )
    return page
