"""Errors people read.

Each error says what was asked, which requirement failed in full words, which backends would do, and the
ways out. The CLI maps them to exit codes (``exit_code``) and prints the message without a traceback.
"""

from __future__ import annotations

from typing import Mapping, Sequence


class HwtuneError(Exception):
    """Base of hwtune's own errors; ``exit_code`` is what the CLI exits with."""

    exit_code: int = 1


class InvalidSpecError(HwtuneError, ValueError):
    """Bad input: a size that is not positive, an unknown dtype, heads that do not divide."""

    exit_code = 2


class UnknownBackendError(InvalidSpecError):
    """A backend name that is not in the catalogue; the message lists the known names."""

    def __init__(self, name: str, kind: str, known: Sequence[str]) -> None:
        self.name = name
        self.kind = kind
        self.known = list(known)
        super().__init__(f"unknown {kind} backend {name!r}; known {kind} backends: {', '.join(self.known)}")


class BackendNotValidError(HwtuneError):
    """An explicitly requested backend cannot serve this spec on this device. Never a silent fallback."""

    exit_code = 3

    def __init__(self, message: str, backend: str, reasons: Sequence[str], valid: Sequence[str]) -> None:
        self.backend = backend
        self.reasons = list(reasons)
        self.valid = list(valid)
        super().__init__(message)


class NoValidBackendError(HwtuneError):
    """No backend in the catalogue can serve this spec on this device; carries every backend's reasons."""

    exit_code = 3

    def __init__(self, message: str, rejected: Mapping[str, Sequence[str]]) -> None:
        self.rejected = {k: list(v) for k, v in rejected.items()}
        super().__init__(message)


class StoreError(HwtuneError):
    """The result store cannot be used as asked (unreachable, wrong revision, refused path)."""

    exit_code = 1


class StoreOutdatedError(StoreError):
    """The store's schema is older (or newer) than this hwtune's; the message says which command fixes it."""


class StoreUnavailableError(StoreError):
    """The store cannot be reached or opened (server down, file missing, refused filesystem, no permission)."""


class StorePathError(StoreUnavailableError):
    """A SQLite store path that cannot be used as given (read-only file or folder, a folder where the file should
    be): bad input, hence exit code 2."""

    exit_code = 2


class StoreDataError(StoreError):
    """Bad input for the store: an import file whose rows fail validation. Bad input, hence exit code 2."""

    exit_code = 2
