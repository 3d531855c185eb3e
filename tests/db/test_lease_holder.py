"""Resuming a run whose lease belongs to a dead process: the holder's name carries its process's start time, so a
pid that was reused (by another process, or by this one: containers restart pids) does not keep a dead holder's
items waiting for their lease. (Lives with the CLI's tests for now; the takeover itself is tested in
tests/tuner/test_takeover.py.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hwtune.db.queue import holder_is_gone, process_start, worker_id

HOST = socket.gethostname()
linux_proc = pytest.mark.skipif(process_start(os.getpid()) is None, reason="no /proc/<pid>/stat here")


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: the pid names no process now
    return proc.pid


@linux_proc
def test_a_live_pid_that_started_at_another_time_is_a_gone_holder() -> None:
    parent = os.getppid()
    started = process_start(parent)
    assert started is not None and started.isdigit()
    assert not holder_is_gone(f"{HOST}:{parent}:{started}:abc123")  # the holder itself, alive
    assert holder_is_gone(f"{HOST}:{parent}:{int(started) + 1}:abc123")  # its pid, reused by another process


@linux_proc
def test_this_process_reusing_a_dead_holders_pid_takes_its_items_over() -> None:
    me = worker_id("abc123")
    host, pid, started, tag = me.split(":")
    assert (host, pid, tag) == (HOST, str(os.getpid()), "abc123") and started == process_start(os.getpid())
    assert not holder_is_gone(me)
    assert holder_is_gone(f"{HOST}:{pid}:{int(started) - 1}:abc123")


@linux_proc
def test_a_holder_whose_process_exited() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = process_start(child.pid)
        assert started is not None and not holder_is_gone(f"{HOST}:{child.pid}:{started}:abc123")
    finally:
        child.kill()
        child.wait()
    assert holder_is_gone(f"{HOST}:{child.pid}:{started}:abc123")


def test_holders_named_without_a_start_time_and_other_hosts() -> None:
    assert holder_is_gone(f"{HOST}:{_gone_pid()}:abc123")  # the older host:pid:tag
    assert holder_is_gone(f"{HOST}:{_gone_pid()}:12345:abc123")
    assert not holder_is_gone(f"{HOST}:{os.getppid()}:abc123")
    assert not holder_is_gone(f"{HOST}:{os.getpid()}:abc123")
    assert not holder_is_gone(f"another-host:{_gone_pid()}:12345:abc123")  # its lease decides
    assert not holder_is_gone("garbage") and not holder_is_gone(f"{HOST}:x:1:abc")


@linux_proc
def test_process_start_reads_a_command_name_with_spaces_and_parentheses() -> None:
    code = "open('/proc/self/comm', 'w').write('py) (x 1 2'); print('ready', flush=True); import time; time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        comm = Path(f"/proc/{child.pid}/comm").read_bytes().rstrip(b"\n")
        assert comm == b"py) (x 1 2"
        stat = Path(f"/proc/{child.pid}/stat").read_bytes()
        after = stat[len(f"{child.pid} (".encode()) + len(comm) + 2 :].split()
        assert process_start(child.pid) == after[19].decode()
    finally:
        child.kill()
        child.wait()
