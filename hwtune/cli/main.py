"""The ``hwtune`` command: thin wiring of subcommands; the logic lives in the library."""

from __future__ import annotations

import typer

from hwtune import __version__
from hwtune.cli import bench, db, info, results, select, serve, tune
from hwtune.cli.common import configure_logging

app = typer.Typer(
    name="hwtune",
    help="Measure which attention / MoE all2all backend is correct and fastest on this GPU, and select from it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
)
app.command("probe")(info.probe)
app.command("backends")(info.backends)
app.command("tune")(tune.tune)
app.command("show")(results.show)
app.command("report")(results.report)
app.command("serve")(serve.serve)
app.add_typer(select.app, name="select")
app.add_typer(bench.app, name="bench")
app.add_typer(db.app, name="db")


def _version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="More detail on stderr: -v info, -vv debug."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only errors on stderr (no warnings or notices)."),
) -> None:
    """hwtune: which backend is correct and fastest for this model on this GPU."""
    configure_logging(verbose, quiet)


def main() -> None:
    """The ``hwtune`` console-script entry point (pyproject's ``[project.scripts]``)."""
    app()
