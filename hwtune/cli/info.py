"""``hwtune probe`` and ``hwtune backends``: what this machine is and what the catalogue holds."""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.table import Table

from hwtune.cli.common import AssumeInstalledOpt, DeviceOpt, JsonOpt, Kind, console, emit_json, guarded
from hwtune.core import catalogue
from hwtune.core.catalogue import Backend
from hwtune.core.environment import current_environment
from hwtune.core.errors import InvalidSpecError
from hwtune.core.packages import check_requirement, installed_version
from hwtune.selector.api import resolve_device


def _gib(n: int | None) -> str:
    return f"{n / 1024**3:.0f} GiB" if n else "?"


@guarded
def probe(json_out: bool = JsonOpt) -> None:
    """Show this machine's device (NVML, no CUDA init) and software stack: the environment fingerprint."""
    env = current_environment(resolve_device("auto"))
    if json_out:
        emit_json(
            {
                "device": env.device.to_dict(),
                "stack": env.stack.to_dict(),
                "fingerprint": env.fingerprint(),
                "environment_hash": env.hash(),
            }
        )
        return
    d = env.device
    table = Table(title="hwtune probe", show_header=False)
    table.add_row("device", d.describe())
    if d.is_cuda:
        table.add_row("GPUs", str(d.gpu_count))
        table.add_row("memory", _gib(d.memory_bytes))
        table.add_row("SMs / L2", f"{d.sm_count or '?'} / {_gib(d.l2_bytes) if d.l2_bytes else '?'}")
        table.add_row("interconnect", d.interconnect)
        table.add_row("driver", d.driver or "?")
        table.add_row("family", d.family)
    for key, value in env.stack.to_dict().items():
        table.add_row(key, value or "not installed")
    table.add_row("environment hash", env.hash())
    console.print(table)


def _availability(b: Backend) -> tuple[bool, list[str]]:
    problems = [p for r in b.packages if (p := check_requirement(r))]
    return not problems, problems


def _backend_json(b: Backend, device_reasons: list[str] | None) -> dict[str, Any]:
    rules = {
        k: (
            sorted(v)
            if isinstance(v, frozenset)
            else v.to_json()
            if hasattr(v, "to_json")
            else [r.describe() for r in v]
            if isinstance(v, tuple)
            else v
        )
        for k, v in vars(b.rules).items()
    }
    available, problems = _availability(b)
    return {
        "name": b.name,
        "kind": b.kind,
        "summary": b.summary,
        "rules": rules,
        "features": sorted(f.value for f in (b.rules.features or ())),
        "packages": [{"requirement": r.describe(), "installed": installed_version(r.distribution)} for r in b.packages],
        "available_here": available,
        "unavailable_reasons": problems,
        "tactics": [{"name": t.name, "phases": sorted(t.phases), "summary": t.summary} for t in b.tactics],
        "sources": dict(b.sources),
        "notes": list(b.notes),
        "valid_on_device": None if device_reasons is None else not device_reasons,
        "device_reasons": device_reasons,
    }


def _device_reasons(b: Backend, device_name: str, assume_installed: bool) -> list[str] | None:
    """Whether the backend runs on the device at all (device type, compute capability, packages)."""
    from hwtune.core.validation import device_rejections, package_rejections

    device = resolve_device(device_name)
    found = device_rejections(b.rules, device, b.name)
    found += package_rejections(b, assume_installed=assume_installed, device=device, who=b.name)
    return [r.message for r in found]


@guarded
def backends(
    kind: Optional[Kind] = typer.Option(None, "--kind", "-k", help="attention or all2all (default: both)."),  # type: ignore[valid-type]
    device: str = DeviceOpt,
    assume_installed: bool = AssumeInstalledOpt,
    markdown: bool = typer.Option(False, "--markdown", help="Print the catalogue's facts as Markdown tables."),
    json_out: bool = JsonOpt,
) -> None:
    """List the catalogue: each backend, its tactics, and whether it can run here (or on --device)."""
    kinds = [kind.value] if kind else [k.value for k in Kind]
    if markdown and json_out:
        raise InvalidSpecError("--markdown and --json are two outputs: give one")
    if markdown:
        from hwtune.core.catalogue.doc import markdown as render

        print(render(kinds), end="")
        return
    rows = [(b, _device_reasons(b, device, assume_installed)) for k in kinds for b in catalogue.backends(k)]
    if json_out:
        emit_json([_backend_json(b, reasons) for b, reasons in rows])
        return
    table = Table(title=f"hwtune backends ({resolve_device(device).describe()})")
    for col in ("backend", "kind", "tactics", "runs here", "why not"):
        table.add_column(col, overflow="fold")
    for b, reasons in rows:
        table.add_row(
            b.name,
            b.kind,
            ", ".join(t.name for t in b.tactics),
            "yes" if not reasons else "no",
            "; ".join(reasons or []),
        )
    console.print(table)
