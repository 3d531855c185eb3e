"""What every command shares: people output on stderr, JSON on stdout, errors without tracebacks.

Exit codes: 0 ok, 1 runtime failure, 2 bad usage or input, 3 no valid backend / requested backend not valid.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from enum import Enum
from typing import Any, Callable, Iterable, Optional, TypeVar, get_args

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hwtune.core.catalogue.base import Kind as CatalogueKind
from hwtune.core.errors import BackendNotValidError, HwtuneError, NoValidBackendError
from hwtune.core.types import PHASES
from hwtune.tuner.options import DEVICES as MEASURE_ON

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


class Choices:
    """A fixed set of values for a ``str`` option, declared once: as typer's ``parser`` it checks the value (a bad
    one is click's usage error, exit 2, naming the option and the values), its ``metavar`` shows the values in
    --help, and ``complete`` offers them to shell completion. With ``check`` (a library normaliser) the library
    decides, so the CLI accepts exactly what the library does, aliases included. With ``lists`` a value may be
    comma-separated (the option repeated is typer's), each part checked. Returns the value in the choices'
    spelling (``nhd`` -> ``NHD``), or as given when ``check`` decides."""

    def __init__(
        self,
        values: Iterable[str],
        what: str,
        *,
        check: Optional[Callable[[str], object]] = None,
        complete: Iterable[str] = (),
        lists: bool = False,
        metavar: Optional[str] = None,
    ) -> None:
        self.values = tuple(values)
        self.what, self.check, self.lists = what, check, lists
        self.completions = tuple(dict.fromkeys([*self.values, *complete]))
        self.metavar = (metavar or "<" + "|".join(self.values) + ">") + (",..." if lists else "")

    def one(self, value: str) -> str:
        """One value in the choices' spelling; ValueError (typer's usage error) naming the known ones."""
        value = value.strip()
        if self.check is not None:
            self.check(value)  # the library's own words when it refuses (InvalidSpecError is a ValueError)
            return value
        found = next((v for v in self.values if v.lower() == value.lower()), None)
        if found is None:
            raise ValueError(f"unknown {self.what} {value!r}; choose from: {', '.join(self.values)}")
        return found

    def __call__(self, value: str) -> str:
        if not self.lists:
            return self.one(value)
        parts = [self.one(p) for p in value.split(",") if p.strip()]
        if not parts:
            raise ValueError(f"no {self.what} given; choose from: {', '.join(self.values)}")
        return ",".join(parts)

    def complete(self, incomplete: str) -> list[str]:
        """Shell completion: the values starting with what was typed (after its last comma for lists)."""
        head, _, tail = incomplete.rpartition(",") if self.lists else ("", "", incomplete)
        prefix = head + "," if head else ""
        return [prefix + v for v in self.completions if v.lower().startswith(tail.lower())]

    def option(self, default: Any, *names: str, help: str, checked: bool = True, **kw: Any) -> Any:
        """A typer.Option taking these values; with ``checked=False`` only listed and completed, where the command
        checks the value itself (exit 2 with the library's message)."""
        parser = {"parser": self} if checked else {}
        return typer.Option(
            default, *names, metavar=self.metavar, autocompletion=self.complete, help=help, **parser, **kw
        )


#: What ``--kind`` takes: the catalogue's kinds (attention, all2all).
Kind = Enum("Kind", {k: k for k in get_args(CatalogueKind)}, type=str)  # type: ignore[misc]


def _device_names() -> list[str]:
    from hwtune.core.devices import simulated_names

    return simulated_names()


def _check_device(name: str) -> None:
    if name.strip().lower() != "auto":
        from hwtune.core.devices import simulated

        simulated(name)  # an unknown name: the library's error listing the known ones


#: ``--device`` of `select` and `backends`: this machine, or a device to plan for (aliases as the library takes).
DEVICE_NAMES = Choices(["auto", *_device_names()], "device", check=_check_device, metavar="<DEVICE>")
#: ``--device`` of `bench` (and `tune`): what runs the candidates here.
RUN_DEVICES = Choices(MEASURE_ON, "device")
#: ``--phase``: the attention phases.
PHASE_NAMES = Choices(PHASES, "phase")
JsonOpt = typer.Option(False, "--json", help="Print only JSON on stdout.")
DeviceOpt = DEVICE_NAMES.option(
    "auto",
    "--device",
    "-d",
    help=f"'auto' (this machine, via NVML) or a simulated device: {', '.join(_device_names())}.",
)
AssumeInstalledOpt = typer.Option(
    False, "--assume-installed", help="Plan for another machine: treat every required package as installed."
)
