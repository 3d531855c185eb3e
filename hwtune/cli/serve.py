"""``hwtune serve``: the selection service (read-only HTTP JSON API over a store; docs/serve.md).

Thin: checks the address-and-token rule (``hwtune.serve.auth``) before the web framework is imported, so a
refused start costs nothing and ``hwtune --help`` never loads Starlette or uvicorn.
"""

from __future__ import annotations

from typing import Optional

import typer

from hwtune.cli.common import guarded
from hwtune.core.errors import InvalidSpecError
from hwtune.serve.auth import TOKEN_ENV, check_binding


@guarded
def serve(
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to listen on; any but loopback needs --token (or HWTUNE_SERVE_TOKEN)."
    ),
    port: int = typer.Option(8421, "--port", min=0, max=65535, help="TCP port (0: any free port, printed)."),
    db: Optional[str] = typer.Option(
        None,
        "--db",
        envvar="HWTUNE_DATABASE_URL",
        help="Store to read, opened read-only (default: the per-user SQLite file).",
        show_default=False,
    ),
    token: Optional[str] = typer.Option(
        None,
        "--token",
        envvar=TOKEN_ENV,
        help="Bearer token every request must carry (at least 16 characters); prefer the environment variable, "
        "which other users cannot read in the process list.",
        show_default=False,
    ),
    access_log: bool = typer.Option(False, "--access-log", help="Log every request on stderr."),
) -> None:
    """Serve selection over HTTP: POST /v1/select/attention, /v1/select/all2all; GET /v1/environments, /v1/runs,
    /v1/health. Read-only; answers from static priorities (flagged) while the store is away."""
    token = check_binding(host, token)
    try:
        from hwtune.serve.server import run
    except ImportError as exc:
        raise InvalidSpecError(
            f"hwtune serve needs Starlette and uvicorn ({exc.name} is missing): pip install 'hwtune[serve]'"
        ) from None
    try:
        run(host, port, db, token, access_log=access_log)
    except KeyboardInterrupt:
        pass
