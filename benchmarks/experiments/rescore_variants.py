"""What the re-scoring experiments share (``decision_tie.py``, ``mix_variants.py``, ``tactic_tie.py``,
``decision_objective.py``): ``benchmarks/regret.py --score-only`` run on imported stores under a runner (a Python
snippet that patches the selector from its environment, then runs regret.py), and its output read back: each policy's
geomean / p95 / worst, the chosen backend and the per-phase backends.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]


def score_variant(runner: str, env: dict[str, str], out: Path, model_args: list[str]) -> dict:
    """One scoring of the stores under ``out`` (``model_args``: regret.py's --model and dtype / block-size flags) with
    ``runner`` and ``env``: {"hwtune": ..., "hwtune_per_phase": ..., "backend": ..., "per_phase": ...} (and "error"
    where regret.py printed no selection)."""
    args = ["--out", str(out), *model_args, "--score-only", "--as-stored", "--device", "h100", "--kv-layout", "NHD"]
    env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", runner, *args], capture_output=True, text=True, env=env, cwd=ROOT)
    text = res.stdout + res.stderr
    row: dict = {}
    for policy in ("hwtune", "hwtune_per_phase"):
        line = next((ln for ln in text.splitlines() if ln.split()[:1] == [policy]), None)
        row[policy] = " / ".join(re.findall(r"(?:geomean|p95|worst) ([\d.inf]+)", line)) if line else "failed"
    head = re.search(r"tp\d+: (\S+) per phase (\{.*\})", text)
    row["backend"], row["per_phase"] = (head.group(1), head.group(2)) if head else (None, None)
    if head is None:
        row["error"] = text.strip().splitlines()[-1:]
    return row


def result_pairs(argv: list[str], usage: str) -> Iterator[tuple[str, Path, str, Path]]:
    """Per ``RESULTS_DIR MODEL`` pair of the command line: (the folder as given, resolved, the model, a fresh folder
    for its stores, removed at the end); exits with ``usage`` where the arguments are not such pairs."""
    if len(argv) < 2 or len(argv) % 2:
        sys.exit(usage)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (results, model) in enumerate(zip(argv[::2], argv[1::2])):
            yield results, Path(results).resolve(), model, Path(tmp) / str(i)  # a model may come from two folders


def import_stores(results: Path, model: str, out: Path) -> tuple[list[str], str]:
    """Import one model's train and oracle stores under ``out``; (regret.py's model arguments, store name)."""
    name, tp, *rest = model.split(":")
    kv = "fp8_e4m3" if "fp8" in rest else "auto"
    bs = next((r[2:] for r in rest if r.startswith("bs")), None)
    stem = f"{name}-tp{tp}" + ("-kvfp8_e4m3" if kv != "auto" else "") + (f"-bs{bs}" if bs else "")
    (out / stem).mkdir(parents=True, exist_ok=True)
    for k in ("train", "oracle"):
        db = f"sqlite:///{out / stem / k}.db"
        subprocess.run([sys.executable, "-m", "hwtune", "db", "import", str(results / f"{stem}_{k}.jsonl"), "--db", db],
                       check=True, capture_output=True, cwd=ROOT)  # fmt: skip
    args = ["--model", f"tests/data/models/{name}.json:{tp}", "--kv-cache-dtype", kv]
    return args + (["--block-size", bs] if bs else []), stem


def rescore(argv: list[str], usage: str, runner: str, env_key: str, label: str, variants: tuple[str, ...]) -> None:
    """Per ``RESULTS_DIR MODEL:TP[:fp8][:bsN]`` pair of ``argv``: its stores imported, then scored under ``runner``
    with ``env_key`` set to each of ``variants``, one JSON line each (``label``: the variant)."""
    for results, path, model, out in result_pairs(argv, usage):
        model_args, stem = import_stores(path, model, out)
        for variant in variants:
            row = score_variant(runner, {env_key: variant}, out, model_args)
            print(json.dumps({"model": stem, "results": results, label: variant, **row}), flush=True)
