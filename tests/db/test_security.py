"""Passwords never shown; the reader role cannot write; SQLite on a network filesystem is refused."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from hwtune.core.errors import StoreError, StoreUnavailableError
from hwtune.db import roles
from hwtune.db.store import Store
from hwtune.db.urls import check_local_filesystem, filesystem_type, mask, redact, resolve
from tests.db.conftest import admin_engine, pg_url_for
from tests.db.helpers import attention, cli

SECRET = "pa:ss@w/rd%20x"
ENCODED = "pa%3Ass%40w%2Frd%2520x"


def test_mask_and_redact() -> None:
    url = f"postgresql+psycopg://tuner:{ENCODED}@db.example:5432/hwtune"
    assert mask(url) == "postgresql+psycopg://tuner:***@db.example:5432/hwtune"
    text = f"failed for {url} with password={SECRET} and {SECRET} and {ENCODED} and password='x y'"
    cleaned = redact(text, url)
    assert SECRET not in cleaned and ENCODED not in cleaned and "x y" not in cleaned
    assert "tuner:***@db.example" in cleaned
    assert redact("postgresql://a:b@h/d") == "postgresql://a:***@h/d"


def test_url_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("platformdirs.user_data_dir", lambda *a, **k: str(tmp_path / "data"))
    assert resolve(None).database == str(tmp_path / "data" / "hwtune.db")
    monkeypatch.setenv("HWTUNE_DATABASE_URL", "postgresql://u@h/db")
    assert resolve(None).drivername == "postgresql+psycopg"
    assert resolve(str(tmp_path / "x.db")).database == str(tmp_path / "x.db")  # --db beats the variable
    with pytest.raises(StoreError, match="uses 'mysql'"):
        resolve("mysql://root:pw@h/x")
    with pytest.raises(StoreError, match="through psycopg 3"):
        resolve("postgresql+psycopg2://u@h/db")


def test_connection_failure_never_shows_the_password(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"postgresql+psycopg://postgres:{ENCODED}@127.0.0.1:1/test"
    with pytest.raises(StoreUnavailableError) as info:
        Store.open(url, connect_timeout=2)
    assert "postgres:***@127.0.0.1:1/test" in str(info.value) and "refused" in str(info.value).lower()
    outs = (cli("status", "--db", url), cli("status", "--db", url, "--json"), cli("upgrade", "--db", url))
    for out in outs:
        assert out.returncode == 1
        for text in (out.stdout, out.stderr, caplog.text, str(info.value)):
            assert SECRET not in text and ENCODED not in text and "%3Ass" not in text


@pytest.mark.postgres
def test_status_masks_the_password(pg_database: str) -> None:
    url = sa.make_url(pg_url_for(pg_database)).set(password="topsecret").render_as_string(hide_password=False)
    assert cli("upgrade", "--db", url).returncode == 0  # trust auth ignores the password; the URL keeps it
    out = cli("status", "--db", url, "--json")
    assert out.returncode == 0 and "topsecret" not in out.stdout + out.stderr
    assert json.loads(out.stdout)["url"].startswith("postgresql+psycopg://postgres:***@")
    human = cli("status", "--db", url)
    assert "topsecret" not in human.stdout + human.stderr and ":***@" in human.stderr


def test_network_filesystems_are_refused(tmp_path: Path) -> None:
    mounts = (
        "/dev/sda1 / ext4 rw 0 0\n"
        "server:/export /mnt/nfs nfs4 rw,relatime 0 0\n"
        "//nas/share /mnt/smb cifs rw 0 0\n"
        "user@h:/x /mnt/my\\040ssh fuse.sshfs rw 0 0\n"
        "/dev/sdb1 /mnt/nfs/local ext4 rw 0 0\n"
    )
    assert filesystem_type(Path("/mnt/nfs/a/hwtune.db"), mounts) == "nfs4"
    assert filesystem_type(Path("/mnt/nfs/local/hwtune.db"), mounts) == "ext4"  # a local disk mounted inside
    assert filesystem_type(Path("/mnt/my ssh/h.db"), mounts) == "fuse.sshfs"
    assert filesystem_type(Path("/mnt/nfsother/h.db"), mounts) == "ext4"  # a prefix is not a mount point
    for path in ("/mnt/nfs/a/hwtune.db", "/mnt/smb/hwtune.db", "/mnt/my ssh/h.db"):
        with pytest.raises(StoreUnavailableError, match="network filesystem .*PostgreSQL"):
            check_local_filesystem(Path(path), mounts)
    check_local_filesystem(tmp_path / "fine.db", mounts)
    check_local_filesystem(tmp_path / "fine.db")  # this machine's real /proc/mounts: tmp is local


def test_roles_sql_renders_psql_variables() -> None:
    sql = roles.render("hw_w", "hw_r", "hwtune")
    assert ':"' not in sql and 'CREATE ROLE "hw_w" LOGIN' in sql
    assert 'ALTER ROLE "hw_r" SET default_transaction_read_only = on' in sql
    stmts = roles.statements(sql)
    assert not any("DELETE" in s.split("--")[0] and "GRANT" in s and "hw_w" in s for s in stmts)
    with pytest.raises(Exception, match="plain identifier"):
        roles.render('x"; DROP TABLE measurements; --', "r", "db")


@pytest.fixture
def role_names(pg_database: str) -> Iterator[tuple[str, str]]:
    tag = uuid.uuid4().hex[:8]
    names = (f"hwtune_w_{tag}", f"hwtune_r_{tag}")
    yield names
    engine = admin_engine()
    with engine.connect() as conn:  # the database holds the roles' grants: drop it first, then the roles
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{pg_database}" WITH (FORCE)')
        for name in names:
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{name}"')
    engine.dispose()


@pytest.mark.postgres
def test_reader_role_cannot_insert(pg_database: str, role_names: tuple[str, str]) -> None:
    writer, reader = role_names
    owner_url = pg_url_for(pg_database)
    with Store.open(owner_url) as owner:
        owner.write([attention(batch=1)])
    out = cli("roles", "--db", owner_url, "--writer", writer, "--reader", reader, "--apply", "--json")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["applied"]) >= 10

    with Store.open(pg_url_for(pg_database, reader), read_only=True, create=False) as ro:
        assert len(ro.measurements()) == 1
    with Store.open(pg_url_for(pg_database, reader)) as rw_attempt:  # even a "writable" open cannot write
        with pytest.raises(StoreError, match="may only read"):
            rw_attempt.write([attention(batch=2)])
        with rw_attempt.engine.connect() as conn:
            conn.exec_driver_sql("SET default_transaction_read_only = off")
            conn.commit()
            with pytest.raises(sa.exc.ProgrammingError, match="permission denied for table measurements"):
                conn.exec_driver_sql("INSERT INTO measurements (environment_id) VALUES (1)")
    with Store.open(pg_url_for(pg_database, writer)) as tuner:
        assert tuner.write([attention(batch=2)]) == 1
        assert tuner.claim("p", "w", 1, 60.0) == []
        tuner.optimize()  # not the owner: PostgreSQL skips ANALYZE with a warning, nothing fails
        for forbidden in ("DELETE FROM measurements", "CREATE TABLE sneaky (x int)"):
            with tuner.engine.connect() as conn, pytest.raises(sa.exc.ProgrammingError, match="denied"):
                conn.exec_driver_sql(forbidden)
    again = cli("roles", "--db", owner_url, "--writer", writer, "--reader", reader, "--apply")
    assert again.returncode == 0, again.stderr  # re-runnable: existing roles are kept
