"""Request limits for an HTTP app serving the kit's chains, before a chain sees the request
(Host, Origin, JSON only, body size, nesting depth, batch size; the README's Security section)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterable
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag_fusion_chain.validation import environment_count

MAX_BODY_BYTES_ENV = "RAG_FUSION_MAX_BODY_BYTES"
MAX_BATCH_ENV = "RAG_FUSION_MAX_BATCH"
ALLOWED_HOSTS_ENV = "RAG_FUSION_ALLOWED_HOSTS"
DEFAULT_MAX_BODY_BYTES = 1_000_000
DEFAULT_MAX_BATCH = 32
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
MAX_JSON_DEPTH = 64
"""How deep a request body's JSON may nest (a LangServe request needs about 6)."""
MAX_READ_SECONDS = 30.0
"""How long a request may take to arrive: a client that stops sending is answered 408."""


def _host_name(host: str) -> str:
    """A ``Host`` value's name without port or IPv6 brackets, lowercased (``[::1]:80`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _json_depth(value: Any) -> int:
    """How deep lists and objects nest in parsed JSON (0 for a scalar), iteratively."""
    stack, deepest = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item)
    return deepest


class RequestLimits:
    """ASGI middleware answering a refusal as JSON ``{"detail": ...}`` naming the setting to change:
    400 foreign Host or too deep JSON, 403 foreign Origin, 415 not JSON, 413 too large, 422 batch."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = ()) -> None:
        self.app = app
        configured = os.environ.get(ALLOWED_HOSTS_ENV, "").split(",")
        names = (*LOOPBACK_HOSTS, *configured, *allowed_hosts)
        self.allowed_hosts = frozenset(_host_name(name) for name in names if name.strip())
        self.max_body_bytes = environment_count(MAX_BODY_BYTES_ENV, DEFAULT_MAX_BODY_BYTES)
        self.max_batch = environment_count(MAX_BATCH_ENV, DEFAULT_MAX_BATCH)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            body = await asyncio.wait_for(self._checked(Request(scope, receive)), MAX_READ_SECONDS)
        except (HTTPException, asyncio.TimeoutError) as error:
            late = HTTPException(408, f"the request did not arrive within {MAX_READ_SECONDS:g} s")
            refusal = error if isinstance(error, HTTPException) else late
            response = JSONResponse({"detail": refusal.detail}, refusal.status_code)
            response.headers["connection"] = "close"
            return await response(scope, receive, send)
        except ClientDisconnect:
            return None
        await self.app(scope, receive if body is None else _replay(body, receive), send)

    async def _checked(self, request: Request) -> bytes | None:
        """The body read (None for GET, HEAD, OPTIONS), or the refusal raised."""
        host = _host_name(request.headers.get("host", ""))
        if host not in self.allowed_hosts:
            advice = f"set {ALLOWED_HOSTS_ENV} or --allow-host"
            raise HTTPException(400, f"the Host {host!r} is not served here ({advice})")
        origin = request.headers.get("origin")
        # scheme://host[:port] (RFC 6454), split by hand: urlsplit raises on http://[x (a 500)
        if origin is not None and _host_name(origin.partition("//")[2]) not in self.allowed_hosts:
            raise HTTPException(
                403, "cross-site requests are refused (the Origin is not a served host)"
            )
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return None
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != "application/json":
            detail = f"the request body must be application/json; got {media_type or 'none'!r}"
            raise HTTPException(415, detail)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.max_body_bytes:
                bound = f"{self.max_body_bytes} bytes (set {MAX_BODY_BYTES_ENV})"
                raise HTTPException(413, f"the request body is over {bound}")
        too_deep = HTTPException(400, f"the JSON body nests deeper than {MAX_JSON_DEPTH}")
        try:
            payload = json.loads(body)
        except RecursionError:
            raise too_deep from None
        except ValueError:
            payload = None  # not JSON: LangServe answers 422
        if _json_depth(payload) > MAX_JSON_DEPTH:
            raise too_deep
        if request.url.path.rstrip("/").endswith("/batch"):
            inputs = payload.get("inputs") if isinstance(payload, dict) else None
            if isinstance(inputs, list) and len(inputs) > self.max_batch:
                detail = f"a batch of {len(inputs)} inputs; the limit is {self.max_batch} (set {MAX_BATCH_ENV})"
                raise HTTPException(422, detail)
        return body


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` handing the app the body already read, then the client's later messages."""
    first: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return first.pop() if first else await receive()

    return replayed


def limit_requests(app: Any, allowed_hosts: Iterable[str] = ()) -> Any:
    """``app`` (FastAPI) with :class:`RequestLimits` (answering ``allowed_hosts`` too) and 422s
    that echo no input back (it may be megabytes), a batch's too (LangServe's would be a 500)."""
    app.add_middleware(RequestLimits, allowed_hosts=allowed_hosts)
    for invalid in (ValidationError, RequestValidationError):
        app.add_exception_handler(invalid, _invalid_input)
    return app


async def _invalid_input(request: Any, error: Any) -> Any:
    """422 with pydantic's messages and where each problem is: no input, no URL, no traceback."""
    errors = [
        {key: value for key, value in item.items() if key not in ("input", "url")}
        for item in error.errors()
    ]
    return JSONResponse({"detail": json.loads(json.dumps(errors, default=str))}, 422)
