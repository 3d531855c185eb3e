"""The Starlette application of ``hwtune serve``: routes, the bearer token, and JSON errors.

Routes (docs/serve.md has bodies, answers and curl examples):

=======  ==========================  ===========================================================
POST     /v1/select/attention        ``hwtune.select_attention``: body ``{"spec": {...}, ...}``
POST     /v1/select/all2all          ``hwtune.select_all2all``
GET      /v1/environments[/{hash}]   environments in the store, with measurement counts
GET      /v1/runs[/{run_id}]         tuning runs, newest first (``?limit=&state=``), or one with its plan
GET      /v1/health                  liveness, and whether the store answers
=======  ==========================  ===========================================================

Every answer is JSON; every error is ``{"error": {"type", "message", "field", ...}}`` with a 4xx or 5xx status.
A cached select answer is returned on the event loop; anything else runs in a worker thread, because reading a
store may block.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any, Awaitable, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from hwtune.serve.requests import BadRequest, parse_runs_query, parse_select
from hwtune.serve.service import Answer, SelectionService, error_payload, to_json

#: Largest request body accepted (a select body is a few hundred bytes).
MAX_BODY_BYTES = 64 * 1024
ENDPOINTS = (
    "POST /v1/select/attention, POST /v1/select/all2all, GET /v1/environments[/{hash}], GET /v1/runs[/{run_id}], "
    "GET /v1/health"
)
log = logging.getLogger("hwtune.serve")


def _respond(answer: Answer) -> Response:
    return Response(answer.body, status_code=answer.status, media_type="application/json")


def _refuse(exc: BadRequest) -> Response:
    return Response(to_json(error_payload(exc)), status_code=exc.status, media_type="application/json")


async def _json_body(request: Request) -> Any:
    """The request's JSON body, or ``BadRequest`` (413 when it is larger than ``MAX_BODY_BYTES``)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BadRequest(f"the request body is larger than {MAX_BODY_BYTES} bytes", "body", 413)
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise BadRequest('the request body is empty; send a JSON object such as {"spec": {...}}', "body")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bytes that are not UTF-8, nesting too deep
        raise BadRequest(f"the request body is not valid JSON ({type(exc).__name__}: {exc})", "body") from None


def _select_endpoint(service: SelectionService, kind: str) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            select = parse_select(kind, await _json_body(request))
        except BadRequest as exc:
            return _refuse(exc)
        answer = service.cached_select(select)  # warm: answered here, on the event loop
        if answer is None:
            answer = await run_in_threadpool(service.select, select)
        return _respond(answer)

    return endpoint


def _routes(service: SelectionService) -> list[Route]:
    async def environments(request: Request) -> Response:
        return _respond(await run_in_threadpool(service.environments, request.path_params.get("hash")))

    async def runs(request: Request) -> Response:
        try:
            limit, state = parse_runs_query(request.query_params)
        except BadRequest as exc:
            return _refuse(exc)
        return _respond(await run_in_threadpool(service.runs, limit, state))

    async def run(request: Request) -> Response:
        return _respond(await run_in_threadpool(service.run, request.path_params["run_id"]))

    async def health(request: Request) -> Response:
        return _respond(await run_in_threadpool(service.health))

    return [
        Route("/v1/select/attention", _select_endpoint(service, "attention"), methods=["POST"]),
        Route("/v1/select/all2all", _select_endpoint(service, "all2all"), methods=["POST"]),
        Route("/v1/environments", environments, methods=["GET"]),
        Route("/v1/environments/{hash}", environments, methods=["GET"]),
        Route("/v1/runs", runs, methods=["GET"]),
        Route("/v1/runs/{run_id}", run, methods=["GET"]),
        Route("/v1/health", health, methods=["GET"]),
    ]


async def _http_error(request: Request, exc: Exception) -> Response:
    """404 and 405 as JSON errors that say what exists."""
    assert isinstance(exc, HTTPException)
    where = f"{request.method} {request.url.path}"
    if exc.status_code == 404:
        message = f"no endpoint {where}; endpoints: {ENDPOINTS}"
    elif exc.status_code == 405:
        message = f"{where} is not allowed; endpoints: {ENDPOINTS}"
    else:
        message = str(exc.detail)
    body = {"error": {"type": "HTTPException", "message": message, "field": "path"}}
    return Response(to_json(body), status_code=exc.status_code, headers=exc.headers, media_type="application/json")


async def _internal_error(request: Request, exc: Exception) -> Response:
    """A bug, not bad input: logged with its traceback, answered 500 without one."""
    log.error("internal error in %s %s", request.method, request.url.path, exc_info=exc)
    body = {"error": {"type": type(exc).__name__, "message": f"internal error: {exc}; the server log has the details"}}
    return Response(to_json(body), status_code=500, media_type="application/json")


class BearerToken:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer TOKEN`` (compared in constant time)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass authorised requests (and non-HTTP events) on; answer the rest 401."""
        if scope["type"] == "http":
            given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self._expected):
                why = "a wrong token" if given else "no 'Authorization: Bearer TOKEN' header"
                message = f"this service needs the token it was started with (--token / HWTUNE_SERVE_TOKEN); got {why}"
                body = {"error": {"type": "Unauthorized", "message": message, "field": "Authorization"}}
                response = Response(
                    to_json(body),
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                    media_type="application/json",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(service: SelectionService, token: str | None = None) -> ASGIApp:
    """The ASGI application over ``service``; with ``token``, every request must carry it as a bearer token."""
    app = Starlette(
        routes=_routes(service),
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
    return BearerToken(app, token) if token else app
