"""Where HWTUNE_TRITON_MLA loses to FlashInfer's fa3 MLA decode at DeepSeek-V3 TP 8 shapes (issue 19; docs/regret.md:
fa3 2.5-17 % ahead at batch 1-2 below 12000 tokens, batch 8 everywhere, batch 32-128 at 700-12000).

For each shape and candidate (FLASHINFER_FA_MLA fa3, HWTUNE_TRITON_MLA auto and tuned, each built by the probe's own
runner code: ``build_problem`` + ``Candidate.runner`` + ``prepare``; the tuned runner searches its configs in
``prepare``, every config checked against auto's output; no correctness gate against the reference here: the probe
passed every one of these candidates at these shapes), it prints:

- ``graph_us``: the median time of one call replayed from a CUDA graph (CUDA events around 20 replays, 15 rounds; no
  L2 flush, unlike the probe, so it is the call's floor);
- ``kernels``: each GPU kernel of one call with its mean device time (torch.profiler over 50 eager calls), so the
  split-KV merge of the Triton kernel and FlashInfer's own kernels are seen apart;
- the Triton config each runner ran, and for a split config the same with 16-bit split partials
  (``MlaConfig.half_partials``: time, kernels, and the output's difference from the float32-partials one).

Outputs one JSON line per (shape, page, candidate) on stdout and, with ``--out``, into that file.

    python benchmarks/experiments/mla_decode_gap.py [--pages 16 64] [--out FILE.jsonl]   (needs a CUDA GPU)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from hwtune.core.types import AttentionSpec, AttentionWorkload  # noqa: E402
from hwtune.probes.attention.candidates.base import load_candidate  # noqa: E402
from hwtune.probes.attention.problem import build_problem  # noqa: E402

SHAPES = [(1, 700), (1, 3000), (2, 700), (2, 3000), (8, 700), (8, 3000), (8, 12000), (8, 20000), (32, 700),
          (32, 3000), (128, 3000), (48, 12000), (32, 48000)]  # fmt: skip
CANDIDATES = [("FLASHINFER_FA_MLA", "fa3"), ("HWTUNE_TRITON_MLA", "auto"), ("HWTUNE_TRITON_MLA", "tuned")]


def spec(page: int) -> AttentionSpec:
    """DeepSeek-V3's attention per rank at TP 8 (16 heads), bf16 latent cache of pages of ``page`` tokens."""
    return AttentionSpec(
        num_heads=16, num_kv_heads=1, head_size=576, dtype="bfloat16", block_size=page, use_mla=True,
        kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
    )  # fmt: skip


def graph_us(run) -> float:  # noqa: ANN001
    """Median per-call time of ``run`` replayed from a CUDA graph (20 calls per replay, 15 rounds)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(20):
            run()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(15):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / 20)
    return statistics.median(times)


def kernels(run, calls: int = 50) -> list[tuple[str, float]]:  # noqa: ANN001
    """(kernel name, mean device us per call) of every GPU kernel ``run`` launches."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    out = []
    for evt in prof.key_averages():
        if evt.device_type != DeviceType.CUDA:  # host-side ops (and their children's device time) left out
            continue
        total = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0.0)
        out.append((evt.key[:90], round(total / calls, 2)))
    return sorted(out, key=lambda kv: -kv[1])


def measure(backend: str, tactic: str, batch: int, context: int, page: int) -> dict:
    w = AttentionWorkload(spec(page), "decode", batch, context)
    row = {"backend": backend, "tactic": tactic, "batch": batch, "context": context, "page": page}
    try:
        candidate = load_candidate(backend)
        reason = candidate.unavailable(w, tactic, "cuda")
        if reason:
            return {**row, "unavailable": reason}
        runner = candidate.runner(w, tactic, "cuda")
        problem = build_problem(w, "cuda", seed=0)
        runner.prepare(problem)
        runner.run()
        torch.cuda.synchronize()
        row["graph_us"] = round(graph_us(runner.run), 2)
        row["kernels"] = kernels(runner.run)
        row["config"] = getattr(runner, "extra", {}).get("config")
        if backend == "HWTUNE_TRITON_MLA" and runner.config.num_splits > 1:
            row["half_partials"] = _half_partials(runner)
    except Exception as e:  # noqa: BLE001 - one failing row must not lose the rest
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return row


def _half_partials(runner) -> dict:  # noqa: ANN001
    """The same config with 16-bit split partials (``MlaConfig.half_partials``): its time and kernels, and its
    output's relative L2 difference from the float32-partials output (both against the same inputs)."""
    runner.run()
    torch.cuda.synchronize()
    f32 = runner.out.float().clone()
    runner.config = dataclasses.replace(runner.config, half_partials=True)
    runner.workspace = runner._workspace(runner.problem, runner.config)
    runner.out.fill_(float("nan"))
    runner.run()
    torch.cuda.synchronize()
    diff = float((runner.out.float() - f32).norm() / f32.norm())
    return {"graph_us": round(graph_us(runner.run), 2), "kernels": kernels(runner.run), "rel_l2_vs_f32": diff}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, nargs="+", default=[16])
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    for page in args.pages:
        for batch, context in SHAPES:
            for backend, tactic in CANDIDATES:  # a failed graph capture may leave the CUDA context unusable: rows
                line = json.dumps(measure(backend, tactic, batch, context, page))  # so far are already written
                print(line, flush=True)
                if args.out:
                    with args.out.open("a") as sink:
                        sink.write(line + "\n")


if __name__ == "__main__":
    main()
