"""Does the decision's workload mix miss the short prefill chunks an engine runs on cached prefixes? Re-scores
committed regret stores (no GPU) with the mix's prefill points (``hwtune.selector.mix.workload_mix``) replaced:

- ``current``: chunks {512, 2048, 8192} on contexts {chunk, 4 x, 16 x} (the rule since the mix was written);
- ``short``: chunks {128, 512, 2048, 8192} on the same contexts (the tail of a chunked prompt, a short prompt);
- ``cached``: chunks {512, 2048, 8192} on those contexts and on ``max_model_len`` (a chunk after a long cached
  prefix: prefix caching, a new turn of a long conversation);
- ``short_cached``: both.

Each prints per store the chosen backend, the per-phase backends and both scores against the oracle, as
``decision_tie.py`` does. The oracle's prefill shapes (96-6000 tokens on 0-30000 cached) are fixed by
``benchmarks/regret.py``; the variants are judged on every store, not fitted to one.

    python benchmarks/experiments/mix_variants.py RESULTS_DIR MODEL:TP[:fp8][:bsN] [RESULTS_DIR MODEL:TP ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rescore_variants import rescore  # noqa: E402

VARIANTS = ("current", "short", "cached", "short_cached")

#: Runs benchmarks/regret.py --score-only with the mix's prefill points chosen by MIX_VARIANT.
RUNNER = r"""
import os, runpy, sys
import hwtune.selector.api as api
import hwtune.selector.mix as mix

variant = os.environ["MIX_VARIANT"]
real = mix.workload_mix


def varied(max_num_seqs=256, max_model_len=32768, profile="balanced", query_len_decode=1):
    points = real(max_num_seqs, max_model_len, profile, query_len_decode)
    if variant == "current":
        return points
    decode = [p for p in points if p.phase == "decode"]
    w_prefill = sum(p.weight for p in points if p.phase == "prefill")
    chunks = ((128,) if "short" in variant else ()) + mix.PREFILL_CHUNKS
    chunks = [c for c in chunks if c <= max_model_len] or [max_model_len]
    extra = (max_model_len,) if "cached" in variant else ()
    prefill = [(ch, ctx) for ch in chunks
               for ctx in sorted({min(c, max_model_len) for c in (ch, 4 * ch, 16 * ch, *extra)})]
    return decode + [mix.MixPoint("prefill", 1, ctx, w_prefill / len(prefill), ch) for ch, ctx in prefill]


mix.workload_mix = api.workload_mix = varied
sys.argv = ["regret.py", *sys.argv[1:]]
runpy.run_path("benchmarks/regret.py", run_name="__main__")
"""


def main() -> None:
    rescore(sys.argv[1:], __doc__ or "", RUNNER, "MIX_VARIANT", "mix", VARIANTS)


if __name__ == "__main__":
    main()
