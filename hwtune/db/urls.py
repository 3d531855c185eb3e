"""Where the store lives, and how its address may be shown to people.

Resolution order is ``--db URL`` (or ``url=``), then ``HWTUNE_DATABASE_URL``, then a SQLite file in the user
data directory. A plain path is accepted as a SQLite file and ``postgresql://`` is pinned to psycopg 3, so
that the same string works in the CLI and in the library. Passwords never leave this module unmasked:
every URL shown to people goes through :func:`mask`, and every error text through :func:`redact`, because
connection failures are exactly where drivers echo what they were given.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote, unquote

import platformdirs
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from hwtune.core.errors import StoreError, StoreUnavailableError
from hwtune.db.sqlite_direct import database_path

ENV_VAR = "HWTUNE_DATABASE_URL"
DEFAULT_FILENAME = "hwtune.db"

#: Filesystems on which SQLite's locking is unreliable (https://www.sqlite.org/faq.html#q5, "SQLite over
#: a network"): POSIX advisory locks over NFS/SMB are often broken, and WAL needs shared memory that only
#: works on one host (https://www.sqlite.org/wal.html, "all processes ... must be on the same host").
NETWORK_FS: frozenset[str] = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb",
        "smb3",
        "smbfs",
        "fuse.sshfs",
        "sshfs",
        "lustre",
        "gpfs",
        "beegfs",
        "fuse.beegfs",
        "ceph",
        "fuse.ceph",
        "cephfs",
        "glusterfs",
        "fuse.glusterfs",
        "9p",
        "afs",
        "ocfs2",
        "gfs2",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.rclone",
        "fuse.juicefs",
        "fuse.weka",
        "wekafs",
        "panfs",
        "davfs",
        "fuse.davfs2",
        "virtiofs",
        "fuse.blobfuse",
        "fuse.blobfuse2",
    }
)


def default_path() -> Path:
    """The per-user SQLite file (``~/.local/share/hwtune/hwtune.db`` on Linux)."""
    return Path(platformdirs.user_data_dir("hwtune", appauthor=False)) / DEFAULT_FILENAME


def resolve(url: str | None = None) -> URL:
    """``url``, else ``HWTUNE_DATABASE_URL``, else the per-user SQLite file, as a SQLAlchemy URL."""
    text = (url or "").strip() or os.environ.get(ENV_VAR, "").strip()
    if not text:
        return URL.create("sqlite", database=str(default_path()))
    if "://" not in text:  # a bare path names a SQLite file
        return URL.create("sqlite", database=str(Path(text).expanduser().resolve()))
    try:
        parsed = make_url(text)
    except ArgumentError:
        raise StoreError(
            f"the store address {redact(text)!r} is not a database URL; use sqlite:///PATH, a file path, "
            "or postgresql+psycopg://USER@HOST/DB"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise StoreError(
            f"the store address {mask(parsed)} uses {backend!r}; hwtune stores results in SQLite "
            "(sqlite:///PATH) or PostgreSQL (postgresql+psycopg://USER@HOST/DB)"
        )
    if backend == "postgresql" and parsed.get_driver_name() != "psycopg":
        raise StoreError(
            f"the store address {mask(parsed)} names the driver {parsed.get_driver_name()!r}; hwtune talks "
            "to PostgreSQL through psycopg 3: write postgresql+psycopg://..."
        )
    return parsed


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL; None for an in-memory database or another dialect."""
    if url.get_backend_name() != "sqlite":
        return None
    return database_path(url.database)  # the light read path's resolution, so both open one file


def mask(url: URL | str) -> str:
    """The URL as people may see it: the password replaced by ``***``."""
    if isinstance(url, str):
        try:
            return make_url(url).render_as_string(hide_password=True)
        except ArgumentError:
            return redact(url)
    return url.render_as_string(hide_password=True)


_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@\s]*)@")
_KEYVALUE = re.compile(r"(?i)(password\s*=\s*)('[^']*'|\S+)")


def redact(text: str, *urls: URL | str | None) -> str:
    """``text`` with any password removed: those of ``urls`` (plain and %-encoded), URL user-info, and
    libpq ``password=...`` pairs. Used on every exception text before it reaches a person or a log."""
    out = str(text)
    for url in urls:
        if url is None:
            continue
        password = None
        if isinstance(url, URL):
            password = url.password
        else:
            try:
                password = make_url(url).password
            except ArgumentError:
                password = None
        if password:
            pw = str(password)
            for form in {pw, quote(pw, safe=""), unquote(pw)}:
                if form:
                    out = out.replace(form, "***")
    out = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", out)
    return _KEYVALUE.sub(r"\1***", out)


def _unescape_mount(field: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as octal (\040 ...).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def filesystem_type(path: Path, mounts_text: str | None = None) -> str | None:
    """The filesystem type of the mount holding ``path`` (longest mount-point prefix in /proc/mounts)."""
    if mounts_text is None:
        try:
            mounts_text = Path("/proc/mounts").read_text()
        except OSError:
            return None  # not Linux: nothing to check against
    target = str(path)
    best: tuple[int, str] | None = None
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point, fstype = _unescape_mount(parts[1]), parts[2]
        inside = target == point or target.startswith(point.rstrip("/") + "/") or point == "/"
        if inside and (best is None or len(point) >= best[0]):
            best = (len(point), fstype)
    return best[1] if best else None


def check_local_filesystem(path: Path, mounts_text: str | None = None) -> None:
    """Refuse a SQLite file on a network filesystem: its locks and WAL shared memory are not safe there."""
    fstype = filesystem_type(path.resolve(), mounts_text)  # resolve(): symlinks into a network mount count
    if fstype and (fstype in NETWORK_FS or fstype.split(".")[-1] in NETWORK_FS):
        raise StoreUnavailableError(
            f"the SQLite store {path} is on a network filesystem ({fstype}); SQLite's file locks and WAL "
            "shared memory are not safe there, so concurrent writers could corrupt it. Put the file on a "
            "local disk (--db /local/path/hwtune.db), or share results through PostgreSQL "
            "(--db postgresql+psycopg://USER@HOST/DB or HWTUNE_DATABASE_URL)."
        )
