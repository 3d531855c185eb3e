"""The split-KV merge launched as a programmatic dependent of the attention kernel (``split_kv.PDL_MERGE``, Hopper's
PDL) against a plain launch, same process, same configs, at the shapes where the merge and the launch gap between the
two kernels are a large share of a call: DeepSeek-V3 TP 8 MLA decode (64-token pages) where FlashInfer's fa3 leads
HWTUNE_TRITON_MLA (issue 19), and Qwen3-30B-A3B TP 4 decode and short prefill chunks with HWTUNE_TRITON_ATTN.

Each runner is the probe's own (``build_problem`` + ``Candidate.runner`` + ``prepare``) with a fixed config: auto's,
and for the MLA kernel also the one-wave split count the ``tuned`` space holds. Times: the median call replayed from a
CUDA graph (``mla_decode_gap.graph_us``, no L2 flush), measured off, on, off, on; ``off_us`` and ``on_us`` are the
lower of each pair. ``identical``: the outputs with and without PDL are equal bit for bit (the same arithmetic).

    python benchmarks/experiments/pdl_merge.py [--out FILE.jsonl]   (CUDA GPU, SM 9.0+)

Results: ``results/experiments/pdl_merge_h200_2026-11-29.jsonl`` (commit 16a2ebd, where every split merge used PDL),
read in docs/kernels.md "The merge kernel as a programmatic dependent"; since then TRITON_ATTN's prefill-style launches
merge without PDL (``split_kv.merges_as_dependent``), so their rows here compare two equal launches (check out 16a2ebd
to repeat them). Rows whose launch has one split, or merges 2-4 decode splits in the attention kernel
(``split_kv.merges_in_kernel``: Qwen3's 32 and 128 x 700), launch no merge kernel either way: they show the noise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from mla_decode_gap import graph_us, spec  # noqa: E402

from hwtune.core.model_config import attention_spec, load_model_config  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.kernels import split_kv  # noqa: E402
from hwtune.probes.attention.candidates.base import load_candidate  # noqa: E402
from hwtune.probes.attention.problem import build_problem  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MLA_SHAPES = [(8, 3000), (8, 12000), (32, 700), (32, 3000), (128, 700), (128, 3000), (1, 3000), (48, 3000)]
#: (phase, batch, context, query tokens) for Qwen3-30B-A3B TP 4
GQA_SHAPES = [("decode", 32, 700, 1), ("decode", 128, 700, 1), ("decode", 8, 3000, 1), ("decode", 1, 12000, 1),
              ("prefill", 1, 1596, 96), ("prefill", 1, 30096, 96), ("prefill", 1, 6384, 384)]  # fmt: skip


def ab(runner) -> dict:  # noqa: ANN001
    """Off / on / off / on graph medians (the lower of each pair) and whether the outputs agree bit for bit."""
    times, outs, before = {False: [], True: []}, {}, split_kv.PDL_MERGE
    for on in (False, True, False, True):
        split_kv.PDL_MERGE = on
        runner.out.fill_(float("nan"))
        runner.run()
        torch.cuda.synchronize()
        outs[on] = runner.out.clone()
        times[on].append(graph_us(runner.run))
    split_kv.PDL_MERGE = before
    return {
        "off_us": round(min(times[False]), 2),
        "on_us": round(min(times[True]), 2),
        "identical": bool(torch.equal(outs[False], outs[True])),
    }


def prepared(backend: str, w: AttentionWorkload, config=None):  # noqa: ANN001, ANN201
    """The probe's runner for ``backend`` at ``w`` (tactic auto), prepared; ``config`` replaces auto's."""
    runner = load_candidate(backend).runner(w, "auto", "cuda")
    runner.prepare(build_problem(w, "cuda", seed=0))
    if config is not None:
        runner.config = config
        runner.workspace = runner._workspace(runner.problem, config)
    return runner


def mla_lines():  # noqa: ANN201
    from hwtune.kernels.mla_configs import MAX_SPLITS

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for batch, ctx in MLA_SHAPES:
        w = AttentionWorkload(spec(64), "decode", batch, ctx)
        auto = prepared("HWTUNE_TRITON_MLA", w)
        # the one-wave split count of mla_config_space: two programs per SM, one program per request (16 heads)
        wave = max(1, min(MAX_SPLITS, 2 * sms // batch, ctx // auto.config.block_n))
        for cfg in dict.fromkeys([auto.config, dataclasses.replace(auto.config, num_splits=wave)]):
            if cfg.num_splits == 1:
                continue  # nothing to merge
            yield (
                {"backend": "HWTUNE_TRITON_MLA", "batch": batch, "context": ctx, "config": cfg.name()},
                prepared("HWTUNE_TRITON_MLA", w, cfg),
            )


def gqa_lines():  # noqa: ANN201
    base = attention_spec(load_model_config(ROOT / "tests/data/models/qwen3-30b-a3b.json"), 4)
    for phase, batch, ctx, q in GQA_SHAPES:
        w = AttentionWorkload(base, phase, batch, ctx, query_len=q)
        runner = prepared("HWTUNE_TRITON_ATTN", w)
        yield {"backend": "HWTUNE_TRITON_ATTN", "phase": phase, "batch": batch, "context": ctx, "query_len": q,
               "config": getattr(runner, "extra", {}).get("config")}, runner  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    for make in (mla_lines, gqa_lines):
        try:
            for line, runner in make():
                try:
                    line |= ab(runner)
                except Exception as e:  # noqa: BLE001 - a failing row is a result line
                    line["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                text = json.dumps(line)
                print(text, flush=True)
                if args.out:
                    with args.out.open("a") as sink:
                        sink.write(text + "\n")
        except Exception as e:  # noqa: BLE001
            print(json.dumps({"error": f"{make.__name__}: {type(e).__name__}: {str(e)[:300]}"}), flush=True)


if __name__ == "__main__":
    main()
