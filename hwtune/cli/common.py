"""What every command shares: people output on stderr, JSON on stdout, errors without tracebacks.

Exit codes: 0 ok, 1 runtime failure, 2 bad usage or input, 3 no valid backend / requested backend not valid.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from typing import Any, Callable, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hwtune.core.errors import BackendNotValidError, HwtuneError, NoValidBackendError

#: People-facing output goes to stderr so that ``--json`` leaves stdout to JSON alone.
console = Console(
    stderr=True,
    highlight=False,
    soft_wrap=True,
    width=None if sys.stderr.isatty() or os.environ.get("COLUMNS") else 160,
)

F = TypeVar("F", bound=Callable[..., Any])


def configure_logging(verbose: int = 0, quiet: bool = False) -> None:
    """Show hwtune's log records on stderr through rich: warnings by default, info with -v, debug with -vv, only
    errors with -q. Idempotent (one handler however often it is called), so tests can invoke the CLI repeatedly."""
    from rich.logging import RichHandler

    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logger = logging.getLogger("hwtune")
    for old in [h for h in logger.handlers if getattr(h, "_hwtune_cli", False)]:
        logger.removeHandler(old)
    handler = RichHandler(console=console, show_time=False, show_path=False, markup=False, rich_tracebacks=False)
    handler._hwtune_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)


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


def winners_table(rows: list[dict[str, Any]], title: str = "winners per workload") -> Table:
    """The winners table (``Winner.to_dict()`` rows), readable in an 80-column terminal: winner names and numbers
    are never cut or broken; the workload label wraps at its spaces."""
    table = Table(title=title)
    longest = max((len(f"{w['backend']}/{w['tactic']}") for w in rows), default=6)
    table.add_column("workload", overflow="fold", ratio=1)
    table.add_column("winner", min_width=longest, no_wrap=True)
    table.add_column("us", justify="right", no_wrap=True)
    table.add_column("next", overflow="fold", ratio=1)
    table.add_column("by", justify="right", no_wrap=True)
    table.add_column("fail", justify="right", no_wrap=True)
    for w in rows:
        table.add_row(  # Text: a label's "[h32/8/128, ...]" is data, not rich markup
            Text(w["label"]),
            Text(f"{w['backend']}/{w['tactic']}"),
            f"{w['median_us']:.1f}",
            Text(w["runner_up"] or "-"),
            f"+{w['margin']:.0%}" if w["margin"] is not None else "-",
            str(w["failures"]) if w["failures"] else "",
        )
    table.caption = "us: median latency in microseconds; next: the runner-up, slower by"
    return table


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
