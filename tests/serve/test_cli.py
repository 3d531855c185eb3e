"""`hwtune serve`: the address-and-token rule, and the real command serving over HTTP."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import httpx
import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.core.errors import InvalidSpecError
from hwtune.serve.auth import TOKEN_ENV, check_binding, is_loopback
from tests.serve.conftest import BODY, make_store

TOKEN = "t0k3n-for-the-serve-tests-only"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True), ("::1", True), ("[::1]", True),
     ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("node-a.cluster", False)],
)  # fmt: skip
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    if loopback:
        assert check_binding(host, None) is None
    else:
        with pytest.raises(InvalidSpecError, match="without a token"):
            check_binding(host, None)
        assert check_binding(host, f"  {TOKEN} ") == TOKEN


def test_a_short_token_is_refused() -> None:
    with pytest.raises(InvalidSpecError, match="at least 16"):
        check_binding("127.0.0.1", "secret")


def test_cli_refuses_another_address_without_a_token(monkeypatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    res = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0", "--port", "0"])
    assert res.exit_code == 2
    assert "refuses to listen on 0.0.0.0 without a token" in res.output and "HWTUNE_SERVE_TOKEN" in res.output
    assert "Traceback" not in res.output
    res = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0", "--token", "short"])
    assert res.exit_code == 2 and "use at least 16" in res.output


def _start(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "hwtune", "serve", *args], stderr=subprocess.PIPE, text=True, env={**os.environ, **env}
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # the first line names the address it listens on
        found = re.search(r"hwtune serve: (http://\S+)", line)
        if found:
            return proc, found.group(1)
    proc.wait(10)
    raise AssertionError(f"hwtune serve exited {proc.returncode} without listening")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM, as a service manager stops it: uvicorn shuts down gracefully, then re-raises the signal."""
    proc.send_signal(signal.SIGTERM)
    try:
        rest = proc.communicate(timeout=15)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (0, -signal.SIGTERM) and "Traceback" not in rest, rest


def test_the_command_serves_with_a_token_on_another_address(tmp_path) -> None:
    path = make_store(tmp_path / "store.db")
    proc, url = _start(["--host", "0.0.0.0", "--port", "0", "--db", str(path)], {TOKEN_ENV: TOKEN})
    try:
        local = url.replace("0.0.0.0", "127.0.0.1")
        refused = httpx.post(f"{local}/v1/select/attention", json=BODY)
        assert refused.status_code == 401 and refused.json()["error"]["field"] == "Authorization"
        assert refused.headers["www-authenticate"] == "Bearer"
        wrong = httpx.get(f"{local}/v1/health", headers={"Authorization": f"Bearer {TOKEN}x"})
        assert wrong.status_code == 401 and "wrong token" in wrong.json()["error"]["message"]
        auth = {"Authorization": f"Bearer {TOKEN}"}
        got = httpx.post(f"{local}/v1/select/attention", json=BODY, headers=auth, timeout=30)
        assert got.status_code == 200 and got.json()["backend"] == "FLASHINFER" and not got.json()["static_fallback"]
        assert httpx.get(f"{local}/v1/health", headers=auth).json()["store"]["configured"] == str(path)
    finally:
        _stop(proc)


def test_the_command_serves_loopback_without_a_token_and_flags_a_missing_store(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    proc, url = _start(["--port", "0", "--db", str(tmp_path / "none-yet.db")], {})
    try:
        assert url.startswith("http://127.0.0.1:")
        got = httpx.post(f"{url}/v1/select/attention", json=BODY, timeout=30)
        assert got.status_code == 200 and got.json()["static_fallback"] is True
    finally:
        _stop(proc)
    assert not (tmp_path / "none-yet.db").exists()  # read-only: a missing store is never created


def test_the_web_framework_is_loaded_only_by_the_service() -> None:
    code = (
        "import sys, hwtune, hwtune.cli.main, hwtune.serve, hwtune.serve.auth; "
        "hwtune.select_attention(hwtune.AttentionSpec(32, 8, 128), device='h100', db=False); "
        "print(','.join(m for m in ('starlette', 'uvicorn', 'httpx', 'anyio') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_without_the_serve_extra_the_command_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['uvicorn'] = None; "
        "from hwtune.cli.main import main; sys.argv = ['hwtune', 'serve']; main()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2 and "pip install 'hwtune[serve]'" in out.stderr and "uvicorn" in out.stderr
