"""MoE all2all candidates measured across processes: correct before timed, ranks in agreement.

``measure_all2all`` / ``measure_all2all_sweep`` (``measure.py``) are what the tuner calls; they import no
torch. The pieces: ``launcher`` (fresh process group per trial, watchdog), ``worker`` (one rank),
``routing`` and ``payload`` (inputs), ``candidates/`` (one module per backend), ``correctness``, ``timing``,
``agreement`` (one backend choice on every rank) and ``peak`` (the interconnect's measured all-to-all peak).
"""

from hwtune.probes.all2all.measure import measure_all2all, measure_all2all_sweep, measure_peak_bandwidth

__all__ = ["measure_all2all", "measure_all2all_sweep", "measure_peak_bandwidth"]
