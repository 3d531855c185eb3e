"""The DCP prefill path with FlashInfer, in both cache layouts, built right and built wrong (issue 16;
docs/probes.md "DCP prefill").

For each cache layout (NHD, HND) and shape, measures FLASHINFER's prefill tactics with DCP 2 (the DCP prefill
path: paged context shares plus ragged new tokens, merged by LSE; one virtual rank's work timed), the same
shape without DCP for comparison, and the DCP path with the new-token wrapper built in the cache's layout (the
engine bug): that one must never be recorded ok with an HND cache.

    python benchmarks/dcp_prefill.py --out FILE.json        (needs a CUDA GPU and flashinfer)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hwtune.core.types import AttentionSpec, AttentionWorkload  # noqa: E402
from hwtune.probes.attention.measure import Planned, measure_attention  # noqa: E402
from hwtune.probes.attention.worker import WorkerPool  # noqa: E402
from hwtune.probes.timing import TimingOptions  # noqa: E402

SPEC = AttentionSpec(num_heads=32, num_kv_heads=8, head_size=128)  # Llama-3.1-8B's attention
SHAPES = [(1, 4096 + 512, 512), (4, 2048 + 256, 256), (1, 2048, 2048)]  # (batch, context, chunk)
WRONG = "tests.probes.fake_candidates:FlashInferCacheLayoutDcpPrefill"


def _row(rec, w: AttentionWorkload, dcp: int, build: str) -> dict:  # noqa: ANN001
    layout = w.spec.kv_layout
    return {
        "layout": layout,
        "dcp": dcp,
        "build": build,
        "tactic": rec.tactic,
        "batch": w.batch,
        "context": w.context_len,
        "chunk": w.query_len,
        "status": rec.status,
        "median_us": rec.stats.median_us if rec.stats else None,
        "compile_s": rec.compile_time_s,
        "rel_l2": (rec.error or {}).get("rel_l2"),
        "message": (rec.message or "")[:300],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tactics", default="fa2-tc,fa3")
    args = ap.parse_args()
    timing = TimingOptions(time_cap_s=1.0)
    rows = []
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    with WorkerPool(env={"PYTHONPATH": path}) as pool:
        for layout in ("NHD", "HND"):
            for b, c, q in SHAPES:
                for dcp, build, override in ((1, "plain", None), (2, "right", None), (2, "cache-layout", WRONG)):
                    spec = replace(SPEC, kv_layout=layout, dcp_size=dcp)
                    w = AttentionWorkload(spec, "prefill", batch=b, context_len=c, query_len=q)
                    planned = [Planned("FLASHINFER", t) for t in args.tactics.split(",")]
                    t0 = time.time()
                    recs = measure_attention(
                        w,
                        planned,
                        device="cuda",
                        timing=timing,
                        timeout_s=400,
                        pool=pool,
                        candidate_override={"FLASHINFER": override} if override else None,
                    )
                    for rec in recs:
                        rows.append(_row(rec, w, dcp, build))
                        print(json.dumps(rows[-1]), f"({time.time() - t0:.0f} s)", flush=True)
    import flashinfer
    import torch

    env = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "flashinfer": flashinfer.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    Path(args.out).write_text(json.dumps({"environment": env, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
