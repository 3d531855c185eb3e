"""Latency of `hwtune serve`: p50/p99 of a select request on a warm server over a store of 100,000 measurements.

    python benchmarks/serve_latency.py --out benchmarks/results/serve_latency_cpu_DATE.json
    python benchmarks/serve_latency.py --rows 100000 --requests 5000 --server-cpu 0 --client-cpu 1

The store (a temporary SQLite file, or --db) gets one attention spec measured in this machine's environment
for a simulated H100 (decode 5 batches x 4 contexts and prefill 3 chunks x 2 prefixes, 3 candidates: 78
measurements, so its answer is ranked from measurements), then is filled to --rows with bench_store.py's
records (400 per spec, 2 other environments). The server is the real command, `python -m hwtune serve --port 0
--db STORE`, pinned to one core (--server-cpu, via sched_setaffinity: `taskset -c 0`); the client runs on
another core (--client-cpu) and sends requests one after another on one keep-alive connection (TCP_NODELAY).

Cases: the first request after start (a miss: reads the store, ranks), warm requests (the same body again:
what an engine or scheduler asking at start pays), warm with ``explain``, warm all2all, and misses (distinct
``max_num_seqs`` per request, so each is computed: the store read and the ranking). Server CPU time per warm
request comes from /proc: what the server itself costs, whatever else runs on its core. Warm p99 is also given
per 1,000 requests beside the share of the two pinned cores that other processes took meanwhile (from
/proc/stat), to show how co-tenant load moves the tail. Goal: warm p99 <= 5 ms on one core.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_store import fill  # noqa: E402  (benchmarks/ is no package)

from hwtune.core.devices import simulated  # noqa: E402
from hwtune.core.environment import current_environment  # noqa: E402
from hwtune.core.records import LatencyStats, MeasurementRecord  # noqa: E402
from hwtune.core.types import AttentionSpec, AttentionWorkload  # noqa: E402
from hwtune.db.store import Store  # noqa: E402

SPEC = {"num_heads": 32, "num_kv_heads": 8, "head_size": 128}
BODY = {"spec": SPEC, "device": "h100", "assume_installed": True}
A2A = {"spec": {"ep_size": 8, "num_experts": 256, "topk": 8, "hidden_size": 7168}, "device": "b200"}
CANDIDATES = {
    "decode": (("FLASHINFER", "xqa"), ("FLASHINFER", "fa2-tc"), ("FLASH_ATTN", "fa3")),
    "prefill": (("FLASHINFER", "fa3"), ("FLASHINFER", "fa2-tc"), ("FLASH_ATTN", "fa3")),
}


def measured_records() -> list[MeasurementRecord]:
    """SPEC measured here (this software stack, a simulated H100): 78 records, FLASHINFER fastest."""
    env = current_environment(simulated("h100"))
    spec = AttentionSpec(**SPEC)
    workloads = [AttentionWorkload(spec, "decode", b, c) for b in (1, 4, 16, 64, 256) for c in (512, 2048, 8192, 32768)]
    workloads += [
        AttentionWorkload(spec, "prefill", 1, chunk + prefix, query_len=chunk)
        for chunk in (512, 2048, 8192)
        for prefix in (0, 8192)
    ]
    out = []
    for w in workloads:
        size = w.batch * w.context_len if w.phase == "decode" else w.query_len * w.context_len / 50
        for i, (backend, tactic) in enumerate(CANDIDATES[w.phase]):
            us = 10 + 0.001 * size * (0.8 + 0.15 * i)
            out.append(
                MeasurementRecord(
                    kind="attention",
                    workload=w.to_dict(),
                    workload_key=w.key(),
                    backend=backend,
                    tactic=tactic,
                    status="ok",
                    stats=LatencyStats.from_samples([us, us * 1.01, us * 0.99]),
                    environment=env.fingerprint(),
                    environment_hash=env.hash(),
                    host="bench-node",
                    run_id="bench-measured",
                )
            )
    return out


def build_store(path: str, rows: int) -> dict[str, Any]:
    with Store.open(path) as store:
        if store.counts()["measurements"]:
            raise SystemExit(f"{store.masked_url} is not empty; give the benchmark a store of its own")
        store.write(measured_records())
    return fill(path, rows, 8000)


def start_server(db: str, cpu: int | None) -> tuple[subprocess.Popen, str]:
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    proc = subprocess.Popen(
        [sys.executable, "-m", "hwtune", "serve", "--port", "0", "--db", db],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=pin,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"hwtune serve: http://([\d.]+):(\d+)", line)
        if found:
            return proc, f"{found.group(1)}:{found.group(2)}"
    raise SystemExit(f"hwtune serve exited {proc.wait()} without listening")


class Client:
    """One keep-alive HTTP/1.1 connection, requests one after another."""

    def __init__(self, address: str) -> None:
        self.conn = http.client.HTTPConnection(address, timeout=60)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, path: str, body: dict) -> tuple[float, int, dict]:
        data = json.dumps(body).encode()
        t0 = time.perf_counter()
        self.conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        raw = resp.read()
        elapsed = time.perf_counter() - t0
        return elapsed, resp.status, json.loads(raw)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3
    return {
        "n": len(xs),
        "p50_ms": round(statistics.median(xs) * 1e3, 3),
        "p90_ms": round(pick(0.90), 3),
        "p99_ms": round(pick(0.99), 3),
        "max_ms": round(xs[-1] * 1e3, 3),
        "mean_ms": round(statistics.fmean(xs) * 1e3, 3),
    }


def _busy_s(cpus: set[int]) -> float:
    """CPU seconds spent (not idle, not iowait) on ``cpus`` since boot, from /proc/stat."""
    total = 0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            values = [int(v) for v in fields]
            total += sum(values[:8]) - values[3] - values[4]  # user .. steal, less idle and iowait
    return total / os.sysconf("SC_CLK_TCK")


def _window(client: Client, path: str, body: dict, n: int, pid: int, cpus: set[int]) -> tuple[list[float], dict]:
    """``n`` requests, with the CPU time the server, this client and every other process spent on ``cpus``."""
    busy0, server0, client0, wall0 = _busy_s(cpus), _cpu_s(pid), time.process_time(), time.perf_counter()
    times = []
    for _ in range(n):
        elapsed, status, data = client.post(path, body)
        assert status == 200, data
        times.append(elapsed)
    wall = time.perf_counter() - wall0
    server, own = _cpu_s(pid) - server0, time.process_time() - client0
    others = max(0.0, _busy_s(cpus) - busy0 - server - own)
    return times, {
        "p99_ms": _stats(times)["p99_ms"],
        "others_cpu_share": round(others / (wall * len(cpus)), 3),
        "server_cpu_s": server,
    }


def warm(client: Client, path: str, body: dict, n: int, warmup: int, pid: int) -> dict[str, Any]:
    """Latency of ``n`` identical requests after ``warmup`` ones, in windows of 1,000 with each window's co-tenant
    load: the share of the two pinned cores' time that other processes (not this server, not this client) took."""
    for _ in range(warmup):
        client.post(path, body)
    cpus = os.sched_getaffinity(0) | os.sched_getaffinity(pid)
    times, windows = [], []
    for start in range(0, n, 1000):
        got, window = _window(client, path, body, min(1000, n - start), pid, cpus)
        times += got
        windows.append(window)
    server = sum(w.pop("server_cpu_s") for w in windows)
    return {
        **_stats(times),
        "per_1000": windows,
        "server_cpu_ms_per_request": round(server / n * 1e3, 3),
        "requests_per_s": round(n / sum(times)),
    }


def run_cases(address: str, pid: int, n: int, warmup: int, misses: int) -> dict[str, Any]:
    client = Client(address)
    first, status, data = client.post("/v1/select/attention", BODY)
    assert status == 200 and not data["static_fallback"], data
    assert data["ranked"][0]["source"] in ("measured", "interpolated"), data["ranked"][0]
    out: dict[str, Any] = {
        "answer": {k: data[k] for k in ("backend", "tactics", "per_phase", "static_fallback")},
        "first_request_ms": round(first * 1e3, 3),
        "warm": warm(client, "/v1/select/attention", BODY, n, warmup, pid),
        "warm_explain": warm(client, "/v1/select/attention", {**BODY, "explain": True}, n // 5, warmup, pid),
        "warm_all2all": warm(client, "/v1/select/all2all", A2A, n // 5, warmup, pid),
    }
    times = []
    for i in range(misses):  # each a new request: read the store, rank over a new mix
        elapsed, status, data = client.post("/v1/select/attention", {**BODY, "max_num_seqs": 1000 + i})
        assert status == 200 and not data["static_fallback"]
        times.append(elapsed)
    out["miss"] = _stats(times)
    return out


def provenance(args: argparse.Namespace, fill_info: dict[str, Any]) -> dict[str, Any]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor(),
    )

    def ver(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    git = lambda *a: subprocess.run(["git", "--no-optional-locks", *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD")
    if commit and git("status", "--porcelain", "--untracked-files=no", "--", "hwtune", "benchmarks"):
        commit += " with uncommitted changes to hwtune/ or benchmarks/"
    return {
        "measures": "hwtune serve: select requests over HTTP on one keep-alive connection, server pinned to one core",
        "device": f"{cpu} ({os.cpu_count()} cores; server on core {args.server_cpu}, client on core {args.client_cpu})",
        "date": time.strftime("%Y-%m-%d"),
        "versions": {
            "python": platform.python_version(),
            **{n: ver(n) for n in ("hwtune", "starlette", "uvicorn", "h11", "httptools", "uvloop", "sqlalchemy")},
            "sqlite": sqlite3.sqlite_version,
        },
        "store": {"kind": "SQLite (temporary file)" if args.db is None else args.db, **fill_info},
        "command": "python " + " ".join(sys.argv),
        "commit": commit or None,
        "cited_in": "docs/serve.md, Latency",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="an empty store to fill (default: a temporary SQLite file)")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--misses", type=int, default=200)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--out", help="write the result JSON here")
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="hwtune-serve-bench-") if args.db is None else None
    db = args.db or os.path.join(tmp.name, "bench.db")  # type: ignore[union-attr]
    fill_info = build_store(db, args.rows)
    print(f"store: {fill_info}", file=sys.stderr)
    if args.client_cpu is not None:
        os.sched_setaffinity(0, {args.client_cpu})
    proc, address = start_server(db, args.server_cpu)
    load = os.getloadavg()[0]
    try:
        result = run_cases(address, proc.pid, args.requests, args.warmup, args.misses)
    finally:
        proc.terminate()
        proc.wait(15)
    result["loadavg_1min_before_after"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    result = {"provenance": provenance(args, fill_info), **result}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
