"""Would finer dispatch cells lower regret? Re-scores committed regret stores (no GPU) with the dispatch grid split
into 1, 2 or 4 cells per doubling (``hwtune.selector.dispatch.CELLS_PER_OCTAVE``) and with the tactic chosen at each
oracle workload's exact shape (the limit of infinitely fine cells: the same per-cell choice, evaluated at the
workload), and times the measured selection of each (docs/tuning.md "Dispatch cells").

    python benchmarks/experiments/dispatch_cells.py RESULTS_DIR MODEL:TP[:fp8] [RESULTS_DIR MODEL:TP ...]

MODEL is a file name under tests/data/models without ``.json`` (``gemma-2-9b-it:1``). Each RESULTS_DIR holds
``<model>-tp<TP>[-kv<dtype>]_{train,oracle}.jsonl`` as ``benchmarks/regret_rescore.sh`` reads them; the stores are
imported into a temporary folder. Prints one line per model: hwtune's geomean / p95 / worst
regret and the selection's milliseconds per variant.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("1", "2", "4", "exact")

#: Runs benchmarks/regret.py --score-only under one variant; prints "SELECT_MS <ms>" for the measured selection.
RUNNER = r"""
import os, runpy, sys, time
import hwtune
import hwtune.selector.dispatch as d
import hwtune.selector.layer_kinds as lk
from hwtune.selector.mix import MixPoint

variant = os.environ["CELLS_VARIANT"]
if variant != "exact":
    d.CELLS_PER_OCTAVE = int(variant)
else:  # every table remembers its per-cell choice; lookup asks it at the workload's own shape
    # entries and built tables are kept alive here, so the ids that key them are never reused
    by_entry, by_table, alive = {}, {}, []
    table_with, build_table, lookup = d.table_with, d.build_table, d.lookup

    def remembering(phases, choose, max_batch, max_context):
        out = table_with(phases, choose, max_batch, max_context)
        by_entry.update((id(e), choose) for e in out)  # a routed phase's table keeps some of these entries
        alive.append(out)
        return out

    def remembering_build(entries):
        entries = tuple(entries)
        out = build_table(entries)
        if entries and id(entries[0]) in by_entry:
            by_table[id(out)] = by_entry[id(entries[0])]
            alive.append(out)
        return out

    def at_the_shape(table, tactics, phase, batch, context, query_len=None):
        choose = by_table.get(id(table))
        prefill = phase == "prefill"
        shape = MixPoint(phase, 1 if prefill else batch, context, 1.0, (query_len or 1) if prefill else 1)
        best = choose and choose(shape)
        return best[0] if best else lookup(table, tactics, phase, batch, context, query_len)

    d.table_with = lk.table_with = remembering
    d.build_table = remembering_build
    d.lookup = at_the_shape
select = hwtune.select_attention

def timed(*a, **k):
    t = time.perf_counter()
    sel = select(*a, **k)
    if k.get("db") is not False:
        print(f"SELECT_MS {(time.perf_counter() - t) * 1e3:.1f}", file=sys.stderr)
    return sel

hwtune.select_attention = timed
sys.argv = ["regret.py", *sys.argv[1:]]
runpy.run_path("benchmarks/regret.py", run_name="__main__")
"""


def stores(results: Path, model: str, out: Path) -> tuple[str, str, str]:
    """Import one model's train and oracle stores under ``out``; (config path:TP, kv dtype, store name)."""
    name, tp, *kv = model.split(":")
    kv_dtype = kv[0] if kv else "auto"
    stem = f"{name}-tp{tp}" + ("-kvfp8_e4m3" if kv_dtype == "fp8" else "")
    (out / stem).mkdir(parents=True, exist_ok=True)
    for k in ("train", "oracle"):
        src = results / f"{stem}_{k}.jsonl"
        db = f"sqlite:///{out / stem / k}.db"
        subprocess.run([sys.executable, "-m", "hwtune", "db", "import", str(src), "--db", db], check=True,
                       capture_output=True, cwd=ROOT)  # fmt: skip
    return f"tests/data/models/{name}.json:{tp}", kv_dtype, stem


def score(out: Path, cfg: str, kv: str, variant: str) -> str:
    args = ["--out", str(out), "--model", cfg, "--score-only", "--as-stored", "--device", "h100", "--kv-layout",
            "NHD", "--kv-cache-dtype", kv]  # fmt: skip
    env = {**os.environ, "CELLS_VARIANT": variant, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", RUNNER, *args], capture_output=True, text=True, env=env, cwd=ROOT)
    ms = re.findall(r"SELECT_MS ([\d.]+)", res.stderr)
    line = next((ln for ln in (res.stdout + res.stderr).splitlines() if ln.startswith("hwtune ")), None)
    if line is None:
        return f"failed: {res.stderr[-300:]}"
    g, p95, worst = re.findall(r"(?:geomean|p95|worst) ([\d.inf]+)", line)
    return f"{g} / {p95} / {worst} ({ms[0] if ms else '?'} ms)"


def main() -> None:
    pairs = sys.argv[1:]
    if len(pairs) < 2 or len(pairs) % 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        for results, model in zip(pairs[::2], pairs[1::2]):
            cfg, kv, stem = stores(Path(results), model, Path(tmp))
            row = {v: score(Path(tmp), cfg, kv, v) for v in VARIANTS}
            print(json.dumps({"model": stem, **row}), flush=True)


if __name__ == "__main__":
    main()
