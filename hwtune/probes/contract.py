"""The probe contract both kinds share, so that an attention candidate in a worker and an all2all candidate
across a process group are measured, failed and stored alike.

- A candidate that cannot run here raises ``Unsupported`` with the real reason (recorded ``unsupported``).
- Every probe runs in processes of its own (never the tuner's): ``NO_MULTICAST_ENV`` is their environment
  floor, and a process that dies is described with ``describe_exit`` and the tail of its stderr.
- Every outcome becomes a ``MeasurementRecord`` through ``to_record``, stamped with the environment
  fingerprint, whatever its status; an ``ok`` without timing statistics is an internal error, never a result.
- Only after ``HEALTHY`` outcomes, or an ``error`` after which the worker's device still runs a kernel correctly
  (``attention/worker.py device_works``), may a worker process be reused.
"""

from __future__ import annotations

import os
import signal
from typing import Any, Mapping

from hwtune.core.environment import Environment
from hwtune.core.records import LatencyStats, MeasurementRecord

#: Outcomes after which a worker process is still trustworthy (any other but a survived ``error``: a fresh one).
HEALTHY = frozenset({"ok", "wrong_answer", "unsupported"})

#: Environment every probe process gets. NVLink multicast (NVLS / NVLink SHARP) stays off: NCCL could pick
#: it on NVSwitch systems and symmetric-memory paths use it; it can take a shared host's GPUs down, and
#: hwtune measures the unicast paths engines run (docs/all2all.md, "Multicast").
NO_MULTICAST_ENV: Mapping[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def shared_compile_cache() -> dict[str, str]:
    """``TRITON_CACHE_DIR`` for every probe process: the one set here, else Triton's own default (``$TRITON_HOME`` or
    the home directory, then ``.triton/cache``), so that every worker reads the kernels the others compiled. Left
    unset, torch's inductor (FLEX_ATTENTION's compile) points it at inductor's own directory for the rest of its
    process: the measuring worker then compiled again what the parallel warm-up had compiled (H100, 2026-11-27:
    35-45 s per prefill constexpr class of HWTUNE_TRITON_ATTN ``tuned``, a third of a default tune's measuring)."""
    if os.environ.get("TRITON_CACHE_DIR"):
        return {"TRITON_CACHE_DIR": os.environ["TRITON_CACHE_DIR"]}
    home = os.environ.get("TRITON_HOME") or os.path.expanduser("~")
    return {"TRITON_CACHE_DIR": os.path.join(home, ".triton", "cache")}


class Unsupported(Exception):
    """The candidate cannot run this workload or tactic here; the message is the real reason."""


def signal_name(num: int) -> str:
    """``SIGSEGV`` for 11; the number itself when the platform does not know it."""
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def describe_exit(code: int | None) -> str:
    """How a probe process ended without a result, as the record's message says it."""
    if code is None:
        return "closed its result pipe while still running"
    if code < 0:
        name = signal_name(-code)
        return f"was killed by {name}" if name.startswith("signal ") else f"was killed by signal {name}"
    return f"exited with code {code} without a result"


def stderr_tail(path: str | os.PathLike[str], start: int | None = None, *, lines: int = 15) -> str:
    """The last ``lines`` lines a process wrote to its log (from byte ``start``, else the last 8 KiB)."""
    try:
        with open(path, "rb") as fh:
            if start is None:
                fh.seek(0, os.SEEK_END)
                start = max(0, fh.tell() - 8192)
            fh.seek(start)
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def to_record(
    kind: str,
    workload: Any,
    backend: str,
    tactic: str,
    outcome: Mapping[str, Any],
    *,
    env: Environment,
    run_id: str | None,
    extra: Mapping[str, Any] | None = None,
) -> MeasurementRecord:
    """One stored record for one outcome (``status``, ``message``, ``stats``, ``error``, ``timing_method``,
    ``compile_time_s``, ``extra``), stamped with ``env``. Statistics are kept for ``ok`` outcomes only."""
    status, message = outcome["status"], outcome.get("message", "")
    raw = outcome.get("stats")
    stats = LatencyStats(**raw) if raw and status == "ok" else None
    if status == "ok" and stats is None:
        status, message = "error", "internal error: an ok result came back without timing statistics"
    return MeasurementRecord(
        kind=kind,
        workload=workload.to_dict(),
        workload_key=workload.key(),
        backend=backend,
        tactic=tactic,
        status=status,
        message=message,
        stats=stats,
        error=outcome.get("error"),
        timing_method=outcome.get("timing_method"),
        compile_time_s=outcome.get("compile_time_s"),
        environment=env.fingerprint(),
        environment_hash=env.hash(),
        gpu_uuid=env.device.uuid,
        run_id=run_id,
        extra={**(outcome.get("extra") or {}), **(extra or {})},
    )
