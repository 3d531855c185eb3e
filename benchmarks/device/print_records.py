"""One line per measurement record in the ``h_*.json`` files that ``hwtune bench attention --json`` wrote
into a folder: workload, backend, tactic, status, median, error, config. kernels.sh (harness sections) and
probes.sh (bench sections) call it after their runs; it feeds no figure itself.

    python3 benchmarks/device/print_records.py "$OUT"
"""

from __future__ import annotations

import json
import pathlib
import sys


def main(folder: str) -> int:
    for f in sorted(pathlib.Path(folder).glob("h_*.json")):
        try:
            recs = json.loads(f.read_text())
        except ValueError as exc:
            print(f.name, "unreadable:", exc)
            continue
        for r in recs:
            s = r.get("stats") or {}
            w = r["workload"]
            print(
                f.name,
                w["phase"],
                w["batch"],
                w["context_len"],
                w["spec"]["kv_layout"],
                w["spec"]["kv_cache_dtype"],
                r["backend"],
                r["tactic"],
                r["status"],
                round(s.get("median_us") or 0, 1),
                r["timing_method"],
                (r.get("error") or {}).get("rel_l2"),
                (r.get("extra") or {}).get("config"),
                r["message"][:160],
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
