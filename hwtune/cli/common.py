"""What every command shares: people output on stderr, JSON on stdout, errors without tracebacks.

Exit codes: 0 ok, 1 runtime failure, 2 bad usage or input, 3 no valid backend / requested backend not valid.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any, Callable, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from hwtune.core.errors import BackendNotValidError, HwtuneError, NoValidBackendError

#: People-facing output goes to stderr so that ``--json`` leaves stdout to JSON alone.
console = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 160)

F = TypeVar("F", bound=Callable[..., Any])


def emit_json(payload: Any) -> None:
    """Write ``payload`` as JSON on stdout and flush, so JSON output stays parseable while people output goes to
    stderr."""
    sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
    sys.stdout.flush()


def _error_payload(exc: HwtuneError) -> dict[str, Any]:
    body: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc), "exit_code": exc.exit_code}
    if isinstance(exc, BackendNotValidError):
        body.update(backend=exc.backend, reasons=exc.reasons, valid=exc.valid)
    if isinstance(exc, NoValidBackendError):
        body["rejected"] = exc.rejected
    return {"error": body}


def guarded(fn: F) -> F:
    """Turn hwtune's errors into a message and an exit code (and a JSON error object under --json)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HwtuneError as exc:
            if kwargs.get("json_out"):
                emit_json(_error_payload(exc))
            console.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            console.print("interrupted")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


JsonOpt = typer.Option(False, "--json", help="Print only JSON on stdout.")
DeviceOpt = typer.Option(
    "auto",
    "--device",
    "-d",
    help="'auto' (this machine, via NVML) or a simulated device: sm80, sm86, sm89, sm90, sm100, sm103, sm120, "
    "a100, h100, h200, b200, gb200, rtx5090, cpu.",
)
AssumeInstalledOpt = typer.Option(
    False, "--assume-installed", help="Plan for another machine: treat every required package as installed."
)
