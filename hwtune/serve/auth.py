"""Who may listen where: loopback without a token, any other address only with one.

A selection service bound to 127.0.0.1 answers only processes of its own machine; bound anywhere else it
answers whoever can reach the port, so ``hwtune serve`` then refuses to start without a bearer token
(``--token`` or ``HWTUNE_SERVE_TOKEN``), and every request must carry ``Authorization: Bearer TOKEN``. This
module imports nothing heavy: the CLI checks the rule before the web framework is loaded.
"""

from __future__ import annotations

import ipaddress

from hwtune.core.errors import InvalidSpecError

#: Environment variable holding the token (safer than --token, which other users can read in ``ps``).
TOKEN_ENV = "HWTUNE_SERVE_TOKEN"
#: Shortest token accepted: a token is the only thing between the store and the network.
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only (127.0.0.0/8, ::1, localhost)."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a host name or an interface address: reachable from elsewhere


def check_binding(host: str, token: str | None) -> str | None:
    """The token the service must demand (None: none), or ``InvalidSpecError`` (exit 2) when ``host`` is not
    loopback and no token was given, or the token is too short to protect anything."""
    token = (token or "").strip() or None
    how = (
        f"pass --token TOKEN or set {TOKEN_ENV} (make one with: python -c "
        "'import secrets; print(secrets.token_urlsafe(32))'); clients then send 'Authorization: Bearer TOKEN'"
    )
    if token is None and not is_loopback(host):
        raise InvalidSpecError(
            f"hwtune serve refuses to listen on {host} without a token: that address can be reached from other "
            f"machines. {how[0].upper()}{how[1:]}; or listen on 127.0.0.1 (the default) and put an authenticating "
            "proxy in front."
        )
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise InvalidSpecError(
            f"the token given to hwtune serve has {len(token)} characters; use at least {MIN_TOKEN_CHARS}: {how}"
        )
    return token
