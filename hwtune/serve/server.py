"""Running the service: bind the socket, then hand it to uvicorn.

The socket is bound here, before uvicorn starts, so that a port in use is one clear error (exit 1) instead of
a log line, and so that ``--port 0`` (any free port) can print the port it got. ``start_in_thread`` runs the
same server in a background thread, for tests and benchmarks.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any

import uvicorn

from hwtune.core.errors import HwtuneError
from hwtune.serve.app import create_app
from hwtune.serve.service import SelectionService


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (IPv6 when the host is an IPv6 address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only when the listening socket
    # says TCP (base_events._set_nodelay); without it every answer after the first waits 40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise HwtuneError(  # exit 1: a runtime failure, not bad usage
            f"hwtune serve cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port or --host"
        ) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _server(service: SelectionService, token: str | None, access_log: bool) -> uvicorn.Server:
    config = uvicorn.Config(
        create_app(service, token),
        log_level="info" if access_log else "warning",
        access_log=access_log,
        lifespan="off",
        timeout_graceful_shutdown=5,
        server_header=False,
    )
    return uvicorn.Server(config)


def url_of(sock: socket.socket) -> str:
    """``http://HOST:PORT`` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run(host: str, port: int, db: str | None, token: str | None, *, access_log: bool = False) -> None:
    """Serve until interrupted (Ctrl-C or SIGTERM): the store check and the address go to stderr first."""
    service = SelectionService(db)
    ok, note = service.watch.check()
    sock = bind(host, port)
    print(f"hwtune serve: {url_of(sock)} (read-only store {service.watch.masked}; docs/serve.md)", file=sys.stderr)
    if not ok:
        print(
            f"hwtune serve: the store does not answer ({note}); answers come from static priorities, flagged "
            "static_fallback, until it does",
            file=sys.stderr,
        )
    for var in ("HWTUNE_ATTENTION_BACKEND", "HWTUNE_ALL2ALL_BACKEND"):
        if os.environ.get(var, "").strip().lower() not in ("", "auto"):
            print(
                f"hwtune serve: {var} is set: requests without 'backend' are answered as if they asked for "
                f"{os.environ[var]}",
                file=sys.stderr,
            )
    try:
        _server(service, token, access_log).run(sockets=[sock])
    finally:
        service.close()
        sock.close()


class Running:
    """A server started by ``start_in_thread``: its ``url``, ``service``, and ``stop()``."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, sock: socket.socket, service: Any) -> None:
        self.server = server
        self.thread = thread
        self.url = url_of(sock)
        self.service = service
        self._sock = sock

    def stop(self) -> None:
        """Ask the server to exit and wait for its thread."""
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.service.close()
        self._sock.close()


def start_in_thread(
    service: SelectionService, token: str | None = None, host: str = "127.0.0.1", port: int = 0
) -> Running:
    """The real server (uvicorn on a bound socket) in a daemon thread, once it accepts connections."""
    sock = bind(host, port)
    server = _server(service, token, access_log=False)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="hwtune-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("the hwtune serve thread did not start")
        time.sleep(0.01)
    return Running(server, thread, sock, service)
