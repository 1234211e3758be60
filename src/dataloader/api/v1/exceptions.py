"""Errors as HTTP responses: every failure is `{"error": code, "detail": text}` with a fitting status.

Handlers are installed on the whole app (the infrastructure routes share the format). A body that
fails validation never reaches the service, so it writes nothing; a database that cannot be reached
is a 503, never a 500. Anything else unexpected is caught by the middleware (see middleware.py) and
becomes a logged 500.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from dataloader.api.v1.models import HTTP_STATUS, ErrorCode
from dataloader.api.v1.schemas import ErrorResponse
from dataloader.api.v1.utils import flat_routes, safe_text
from dataloader.exceptions import DataloaderError, ValidationFailed
from dataloader.logger.context_vars import client_gone
from dataloader.storage.db import CONNECTION_ERRORS

log = logging.getLogger("dataloader.api")


class ApiError(DataloaderError):
    """An error raised by the HTTP layer itself (the service's errors subclass DataloaderError too)."""

    def __init__(self, code: ErrorCode, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.headers = headers


def error_response(code: str, detail: str, status: int | None = None, *,
                   fields: list[dict[str, Any]] | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": code, "detail": safe_text(detail, 2000)}
    if fields is not None:
        body["fields"] = fields
    return JSONResponse(body, status_code=status or HTTP_STATUS.get(code, 400), headers=headers)


def error_responses(*codes: ErrorCode) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` for a route that can fail with `codes`."""
    by_status: dict[int, list[str]] = {}
    for code in (*codes, ErrorCode.validation_error, ErrorCode.database_unavailable):
        by_status.setdefault(HTTP_STATUS[code], []).append(code.value)
    return {
        status: {"model": ErrorResponse, "description": "error: " + ", ".join(sorted(set(names)))}
        for status, names in sorted(by_status.items())
    }


def _is_json_request(request: Request) -> bool:
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return content_type == "application/json" or content_type.endswith("+json")


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        where = next(e for e in errors if e.get("type") == "json_invalid")
        reason = (where.get("ctx") or {}).get("error", "malformed")
        return error_response(ErrorCode.invalid_json,
                              f"request body is not valid JSON: {reason} at char {where['loc'][-1]}")
    body_errors = [e for e in errors if e.get("loc", ("",))[0] == "body"]
    if body_errors and request.method in ("POST", "PUT", "PATCH") and not _is_json_request(request):
        return error_response(ErrorCode.unsupported_media_type,
                              "send the body as JSON with the header Content-Type: application/json")
    fields = [
        {
            "loc": [p if isinstance(p, int) else safe_text(p, 100) for p in e.get("loc", ())],
            "msg": safe_text(e.get("msg", "").removeprefix("Value error, "), 500),
            "type": safe_text(e.get("type", ""), 100),
        }
        for e in errors[:50]
    ]
    summary = "; ".join(f"{'.'.join(str(p) for p in f['loc'][1:] or f['loc'])}: {f['msg']}"
                        for f in fields[:5])
    log.info("request rejected", extra={"error": "validation_error", "fields": fields[:5]})
    return error_response(ErrorCode.validation_error, summary or "invalid request", fields=fields)


async def _dataloader_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DataloaderError)
    code = exc.code if exc.code in HTTP_STATUS else ErrorCode.invalid_request
    headers = exc.headers if isinstance(exc, ApiError) else None
    if code == ErrorCode.too_many_queries:
        headers = {"Retry-After": "1"}
    # A validation_error the service found carries `fields` as one the request model found does.
    fields = exc.fields[:50] if isinstance(exc, ValidationFailed) else None
    return error_response(code, str(exc), headers=headers, fields=fields)


async def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: ErrorCode.not_found, 405: ErrorCode.method_not_allowed,
            413: ErrorCode.request_too_large, 401: ErrorCode.unauthorized}.get(exc.status_code)
    if exc.status_code == 400 and _too_many_digits(exc):
        # Valid JSON that Python will not turn into an int (more than sys.get_int_max_str_digits()
        # digits): the body parsed, a value in it is out of range, so a 422 like any such value.
        return error_response(ErrorCode.validation_error,
                              f"a number in the body has more than {sys.get_int_max_str_digits()} digits")
    if code is None:
        code = ErrorCode.invalid_json if exc.status_code == 400 else ErrorCode.invalid_request
    headers = exc.headers
    if exc.status_code == 405:
        # The router answers 405 from the first route whose path matched, so its Allow names that
        # route's methods only; the path's other routes (GET and DELETE of one resource) count too.
        allow = ", ".join(allowed_methods(request))
        if request.method == "OPTIONS":
            # OPTIONS asks which methods the path takes: that is the answer, not an error.
            return Response(status_code=204, headers={"Allow": allow})
        headers = {**(headers or {}), "Allow": allow}
    return error_response(code, str(exc.detail), exc.status_code, headers=headers)


def _too_many_digits(exc: BaseException) -> bool:
    cause = exc.__cause__
    return isinstance(cause, ValueError) and "integer string conversion" in str(cause)


def allowed_methods(request: Request) -> list[str]:
    """The methods the request's path takes (OPTIONS among them): those of every route whose
    template matches it and whose path parameters it fits. `/api/v1/jobs/trigger` matches the
    template `/api/v1/jobs/{job_id}` too, but `trigger` is no job id, so DELETE and PATCH (always a
    422 there) are not listed."""
    matched: list[tuple[BaseRoute, dict[str, Any]]] = []
    for route in flat_routes(request.app.router.routes):
        match, child = route.matches({**request.scope, "method": "__none__"})
        if match is not Match.NONE:
            matched.append((route, child.get("path_params", {})))
    fitting = [route for route, params in matched if _params_fit(route, params)] or [r for r, _ in matched]
    methods = {method for route in fitting for method in getattr(route, "methods", None) or ()}
    return sorted(methods | {"OPTIONS"}) if methods else []


def _params_fit(route: BaseRoute, params: dict[str, Any]) -> bool:
    """Whether the path parameters pass the route's own validation (a UUID where it wants one)."""
    for field in getattr(getattr(route, "dependant", None), "path_params", ()):
        value = params.get(getattr(field, "alias", None))
        if value is None:
            continue
        try:
            _, errors = field.validate(value, {}, loc=("path", field.alias))
        except Exception:  # a FastAPI internal changed: count the route, as before
            continue
        if errors:
            return False
    return True


async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    if client_gone():
        # The request was cancelled because its client left, and the cancel closed the connection
        # under its statement: the client's doing, counted as 499 (api/middleware.py), not an outage.
        log.info("client disconnected; its statement was interrupted", extra={"error": safe_text(repr(exc))})
    else:
        log.warning("database unavailable", extra={"error": safe_text(repr(exc))})
    return error_response(ErrorCode.database_unavailable,
                          "the database cannot be reached right now; retry later",
                          headers={"Retry-After": "5"})


async def _data_error(request: Request, exc: Exception) -> JSONResponse:
    # The statement failed as a whole, so nothing was written. Input checks should catch these
    # first; reaching here means a value slipped past them.
    log.warning("database refused a value", extra={"error": safe_text(str(exc))})
    return error_response(ErrorCode.invalid_request, f"the database refused a value: {exc}")


async def _query_canceled(request: Request, exc: Exception) -> JSONResponse:
    # PostgreSQL cancelled the statement: its statement_timeout (the API pool's, or a count's own)
    # ran out. The statement failed as a whole, so nothing was written; the same request would time
    # out again, so the answer says what to change rather than "retry".
    settings = getattr(getattr(request.app.state, "runtime", None), "settings", None)
    limit = f" ({settings.api_statement_timeout_sec:g} s, DL_API_STATEMENT_TIMEOUT_SEC; counts " \
            f"{settings.api_count_timeout_sec:g} s, DL_API_COUNT_TIMEOUT_SEC)" if settings is not None else ""
    log.warning("query timed out", extra={"error": safe_text(str(exc)), "path": safe_text(request.url.path, 200)})
    return error_response(ErrorCode.query_timeout,
                          f"the query ran longer than its time limit{limit} and was cancelled; nothing "
                          "was changed: narrow the filter, or ask the operator to raise the limit")


def install_exception_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(DataloaderError, _dataloader_error)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(asyncpg.exceptions.DataError, _data_error)
    app.add_exception_handler(asyncpg.exceptions.QueryCanceledError, _query_canceled)
    for exc_type in CONNECTION_ERRORS:  # OSError covers TimeoutError too
        app.add_exception_handler(exc_type, _database_unavailable)
