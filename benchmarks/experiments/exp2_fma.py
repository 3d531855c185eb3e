"""HWTUNE_TRITON_ATTN's prefill with half of each unmasked tile's exponentials on the FMA units
(``exp2_fma.EXP2_ON_FMA``) against all of them on the special-function unit (the default), on the probe's problems of
``bt_chunks.py`` (long and short chunks of the regret runs' misses, 16- and 128-token pages), same process, same
configs: auto's and the tuned space's usual 128 x 128 and 128 x 64 tiles. Times: the median call replayed from a CUDA
graph (no L2 flush; ``mla_decode_gap.graph_us``); ``rel_l2``: the FMA output's relative L2 distance from the default's.

Why: without warp specialisation (Triton 3.6 on Hopper) a tile's exponentials and its dots do not overlap, and at head
128 the special-function unit needs about as many cycles as the tensor cores (``exp2_fma``'s docstring).

    python benchmarks/experiments/exp2_fma.py [--label NAME] [--out FILE.jsonl]   (CUDA GPU)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from bt_chunks import each_config, write_line  # noqa: E402
from mla_decode_gap import graph_us  # noqa: E402

from hwtune.kernels import exp2_fma  # noqa: E402


def ab(run, out) -> dict:  # noqa: ANN001
    """Median times with the exponentials on the special-function unit (``sfu_us``) and half on the FMA units
    (``fma_us``), and the FMA output's relative L2 distance from the other's."""
    row, outputs = {}, {}
    for on_fma in (False, True):
        exp2_fma.EXP2_ON_FMA = on_fma
        out.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        outputs[on_fma] = out.float().clone()
        row["fma_us" if on_fma else "sfu_us"] = round(graph_us(run), 2)
    exp2_fma.EXP2_ON_FMA = False
    row["rel_l2"] = float((outputs[True] - outputs[False]).norm() / outputs[False].norm())
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--label", default="", help="a name for the kernel tree measured")
    args = ap.parse_args()
    for line, runner in each_config(args.label):
        try:
            line |= ab(runner.run, runner.out)
        except Exception as e:  # noqa: BLE001 - a config that cannot run is a result line
            exp2_fma.EXP2_ON_FMA = False
            line["error"] = repr(e)[:300]
        write_line(line, args.out)


if __name__ == "__main__":
    main()
