"""The coupled configurations of issue 16 through every valid candidate on this GPU (docs/probes.md,
"Coupled configurations on an H100").

Each configuration is one workload measured as `hwtune tune` measures it (gate, then timing) with every valid
(backend, tactic): a mixed prefill+decode batch with speculative decoding (its second batch rotates the
requests), decode with DCP 2 and speculative decoding (split-and-merge with a non-causal first share), and
DCP 2 prefill (the DCP prefill path), each in both KV layouts. A correct backend must come out ok or
unsupported with a reason, never wrong_answer; the JSON keeps every record.

    python benchmarks/coupled_gate.py --out FILE.json          (needs a CUDA GPU; flashinfer where installed)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hwtune.core.detect import detect  # noqa: E402
from hwtune.core.types import AttentionSpec, AttentionWorkload  # noqa: E402
from hwtune.probes.attention.measure import measure_attention, plan_candidates  # noqa: E402
from hwtune.probes.attention.worker import WorkerPool  # noqa: E402
from hwtune.probes.timing import TimingOptions  # noqa: E402


def configurations() -> list[tuple[str, AttentionWorkload]]:
    """(label, workload) for each coupled configuration, in both layouts (Llama-3.1-8B's heads, bf16)."""
    out = []
    for layout in ("NHD", "HND"):
        spec = AttentionSpec(32, 8, 128, kv_layout=layout, spec_tokens=2)
        out.append((f"mixed+spec {layout}", AttentionWorkload(spec, "mixed", 8, 2048, query_len=512, num_prefill=1)))
        dcp = AttentionSpec(32, 8, 128, kv_layout=layout, spec_tokens=2, dcp_size=2)
        out.append((f"dcp2+spec decode {layout}", AttentionWorkload(dcp, "decode", 16, 2048, query_len=3)))
        dcp1 = AttentionSpec(32, 8, 128, kv_layout=layout, dcp_size=2)
        out.append((f"dcp2 prefill {layout}", AttentionWorkload(dcp1, "prefill", 2, 2048 + 512, query_len=512)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    profile = detect()
    rows = []
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    with WorkerPool(env={"PYTHONPATH": path}) as pool:
        for label, w in configurations():
            planned = plan_candidates(w, profile)
            t0 = time.time()
            for rec in measure_attention(
                w,
                planned,
                device="cuda",
                profile=profile,
                timing=TimingOptions(time_cap_s=0.5),
                timeout_s=400,
                pool=pool,
            ):
                rows.append(
                    {
                        "config": label,
                        "backend": rec.backend,
                        "tactic": rec.tactic,
                        "status": rec.status,
                        "median_us": rec.stats.median_us if rec.stats else None,
                        "compile_s": rec.compile_time_s,
                        "error": rec.error,
                        "message": (rec.message or "")[:300],
                    }
                )
                print(
                    json.dumps({k: rows[-1][k] for k in ("config", "backend", "tactic", "status", "median_us")}),
                    flush=True,
                )
            print(f"# {label}: {time.time() - t0:.0f} s", flush=True)
            Path(args.out).write_text(json.dumps({"environment": _environment(), "rows": rows}, indent=1))


def _environment() -> dict[str, str]:
    import torch

    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    try:
        import flashinfer

        env["flashinfer"] = flashinfer.__version__
    except ImportError:
        pass
    return env


if __name__ == "__main__":
    main()
