"""The isolated worker: candidates run in a child process, never in the tuner's own.

A CUDA illegal memory access poisons its process for good, and a hung kernel never returns; so each job
goes to a worker process in its own session (process group) with a time limit. The parent sends one JSON
line per job on the worker's stdin and reads one JSON line per result from a dedicated pipe (libraries may
print to stdout, so stdout and stderr go to a log file whose tail is kept as evidence). Outcomes:
- no result within the limit: ``timeout`` (the whole process group is killed);
- the worker dies, exits, or closes the pipe without a result: ``crashed``, with the signal or exit code
  and the last stderr lines;
- an ``error`` the worker survived with its device still working (a Python exception: out of GPU memory, a
  compiler's refusal; ``device_works`` runs a small kernel and synchronizes) keeps it: starting a fresh one costs
  about 10 s on a GPU (imports, CUDA context, loading compiled kernels) and drops the compiler's state;
- anything else but ok / wrong_answer / unsupported: the worker is discarded, the next job gets a fresh one.
Results are JSON; nothing is unpickled.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from hwtune.probes.contract import HEALTHY, NO_MULTICAST_ENV, describe_exit, shared_compile_cache, stderr_tail


@dataclass
class WorkerPool:
    """Runs jobs one at a time in a worker process, replacing the worker after any unhealthy outcome."""

    env: dict[str, str] = field(default_factory=dict)
    _proc: subprocess.Popen[bytes] | None = None
    _result_fd: int | None = None
    _log: str | None = None
    _buffer: bytes = b""
    started: int = 0

    def _start(self) -> None:
        read_fd, write_fd = os.pipe()
        fd, self._log = tempfile.mkstemp(prefix="hwtune-worker-", suffix=".log")
        env = {**os.environ, **shared_compile_cache(), **self.env, **NO_MULTICAST_ENV, "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "hwtune.probes.attention.worker", "--result-fd", str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=fd,
            stderr=fd,
            pass_fds=(write_fd,),
            env=env,
            start_new_session=True,
        )
        os.close(fd)
        os.close(write_fd)
        self._result_fd = read_fd
        self._buffer = b""
        self.started += 1

    def _kill(self) -> None:
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._proc.wait()
            if self._proc.stdin:
                self._proc.stdin.close()
        if self._result_fd is not None:
            os.close(self._result_fd)
        if self._log:
            try:
                os.unlink(self._log)
            except OSError:
                pass
        self._proc, self._result_fd, self._log = None, None, None

    def close(self) -> None:
        """Let the worker exit on EOF (10 s grace), then kill its process group and remove its log."""
        if self._proc is not None and self._proc.poll() is None and self._proc.stdin:
            try:
                self._proc.stdin.close()  # EOF: the worker exits on its own
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def prestart(self) -> None:
        """Start a worker unless one is alive (imports, and the CUDA context where there is a GPU). The tuner calls it
        before its warm-up, which takes minutes, so the first job does not wait for a fresh worker (about 10 s on an
        H100)."""
        if self._proc is None or self._proc.poll() is not None:
            self._kill()
            self._start()

    def run(self, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Run one job in the worker (started afresh if none is alive) and return its result dict; a timeout or crash
        becomes a result too, and any unhealthy outcome discards the worker."""
        self.prestart()
        assert self._proc is not None and self._proc.stdin is not None and self._log is not None
        log_start = os.path.getsize(self._log)
        try:
            self._proc.stdin.write((json.dumps(job) + "\n").encode())
            self._proc.stdin.flush()
        except BrokenPipeError:
            pass  # died between jobs; the read below reports it
        result = self._read(timeout_s, log_start)
        survived = result.pop("device_works", False) and result.get("status") == "error"
        if result.get("status") not in HEALTHY and not survived:
            self._kill()
        return result

    def _read(self, timeout_s: float, log_start: int) -> dict[str, Any]:
        assert self._proc is not None and self._result_fd is not None and self._log is not None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                tail = stderr_tail(self._log, log_start)
                self._kill()
                return {
                    "status": "timeout",
                    "message": f"no result within {timeout_s:g} s; the worker's process "
                    "group was killed" + (f". Last output:\n{tail}" if tail else ""),
                }
            ready, _, _ = select.select([self._result_fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self._result_fd, 1 << 16)
            if not chunk:  # EOF: the worker is gone
                try:
                    code = self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    code = None
                tail = stderr_tail(self._log, log_start)
                return {
                    "status": "crashed",
                    "message": f"the worker {describe_exit(code)}" + (f". Last output:\n{tail}" if tail else ""),
                }
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)


# --- the worker process ---------------------------------------------------------------------------------


def _serve(result_fd: int) -> None:
    import torch

    from hwtune.probes.attention.job import run_job

    if torch.cuda.is_available():
        torch.cuda.init()  # the context now, while the first job is still to come (WorkerPool.prestart)
    out = os.fdopen(result_fd, "w")
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            result = run_job(job)
        except Exception as exc:  # a candidate's own exception: an error record, with the evidence
            tb = traceback.format_exc(limit=6)
            print(tb, file=sys.stderr, flush=True)
            result = {"status": "error", "message": f"{type(exc).__name__}: {str(exc).strip()[:2000]}"}
        if result.get("status") == "error":
            result["device_works"] = device_works(job.get("device", "cuda"))
        out.write(json.dumps(result, default=float) + "\n")
        out.flush()


def device_works(device: str) -> bool:
    """Whether this worker's device still runs a kernel correctly after a failed job (a CUDA error such as an illegal
    memory access is sticky: every later call fails), on the default stream with no capture left open (a job that
    failed inside a CUDA-graph capture can leave the capture's side stream current). Frees what the job left cached."""
    import gc

    import torch

    gc.collect()
    if device != "cuda":
        return True
    try:
        if torch.cuda.is_current_stream_capturing() or torch.cuda.current_stream() != torch.cuda.default_stream():
            return False
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        x = torch.ones(1024, device="cuda")
        return float((x + 1).sum()) == 2048.0
    except Exception:  # the context is poisoned: the worker must go
        return False


def main(argv: list[str] | None = None) -> None:
    """The worker process's entry point: serve jobs from stdin, writing one JSON result line per job to
    ``--result-fd``."""
    import argparse

    parser = argparse.ArgumentParser(description="hwtune measurement worker (started by WorkerPool)")
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv)
    _serve(args.result_fd)


if __name__ == "__main__":
    main()
