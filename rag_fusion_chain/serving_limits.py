"""Request limits for an HTTP app serving the kit's chains: Host, content type, body size, JSON
depth and batch size.

:class:`RequestLimits` is a plain ASGI middleware. It answers ``421`` to a request whose ``Host``
is not one the server was started for (loopback names by default, more with
``RAG_FUSION_ALLOWED_HOSTS`` or ``rag-fusion serve --allow-host``), so a web page cannot reach the
server through DNS rebinding; ``415`` to a POST whose body is not declared JSON, so a cross-site
"simple" form or ``text/plain`` POST never runs a chain; ``413`` to a request body over
``max_body_bytes`` (default 1 MB, ``RAG_FUSION_MAX_BODY_BYTES``) without reading past the limit,
and ``422`` to a LangServe ``/batch`` request with more than ``max_batch`` inputs (default 32,
``RAG_FUSION_MAX_BATCH``) and to JSON nested deeper than ``max_json_depth`` (default 64), before
the chain sees any of them. Every refusal is a JSON ``{"detail":
...}`` naming the limit and the setting that changes it. :func:`limit_requests` adds it to an app
together with a handler that answers 422 (not 500) to an invalid input inside a batch, which
LangServe validates outside its own error translation. ``rag-fusion serve`` does this; in an app
made by ``langchain app new``, add it to ``app/server.py``:

>>> from fastapi import FastAPI  # doctest: +SKIP
>>> app = FastAPI()  # doctest: +SKIP
>>> limit_requests(app)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

MAX_BODY_BYTES_ENV = "RAG_FUSION_MAX_BODY_BYTES"
MAX_BATCH_ENV = "RAG_FUSION_MAX_BATCH"
ALLOWED_HOSTS_ENV = "RAG_FUSION_ALLOWED_HOSTS"
DEFAULT_MAX_BODY_BYTES = 1_000_000
DEFAULT_MAX_BATCH = 32
DEFAULT_MAX_JSON_DEPTH = 64
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
"""Host names accepted by default: a server on 127.0.0.1 is only meant to be reached as itself."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def configured_limit(variable: str, default: int) -> int:
    """The positive integer in the environment variable ``variable``, else ``default``.

    >>> configured_limit("RAG_FUSION_NOT_SET", 32)
    32
    """
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{variable} must be a positive integer; got {text!r}")
    return value


def allowed_hosts(extra: Iterable[str] = ()) -> frozenset[str]:
    """Loopback names, ``extra`` and the comma-separated names in ``RAG_FUSION_ALLOWED_HOSTS``.

    >>> sorted(allowed_hosts(["rag.internal"]))
    ['127.0.0.1', '::1', 'localhost', 'rag.internal']
    """
    configured = os.environ.get(ALLOWED_HOSTS_ENV, "").split(",")
    names = {name.strip().lower().strip("[]") for name in [*extra, *configured]}
    return LOOPBACK_HOSTS | {name for name in names if name}


def host_name(scope: Scope) -> str:
    """The ``Host`` header's name, without port or IPv6 brackets, lower-cased ('' when absent)."""
    value = next((v for k, v in scope.get("headers", []) if k.lower() == b"host"), b"")
    host = value.decode("latin-1").strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def json_depth_exceeds(body: bytes, limit: int) -> bool:
    """True when the JSON text ``body`` nests arrays/objects deeper than ``limit`` (one pass)."""
    depth, in_string, escaped = 0, False, False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # closing quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return False


def _is_json(scope: Scope) -> bool:
    value = next((v for k, v in scope.get("headers", []) if k.lower() == b"content-type"), b"")
    media_type = value.decode("latin-1").split(";", 1)[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


class RequestLimits:
    """ASGI middleware refusing foreign Hosts (421), non-JSON POSTs (415), oversized bodies (413),
    and too deep JSON or oversized LangServe batches (422)."""

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int | None = None,
        max_batch: int | None = None,
        hosts: Iterable[str] = (),
        max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes or configured_limit(
            MAX_BODY_BYTES_ENV, DEFAULT_MAX_BODY_BYTES
        )
        self.max_batch = max_batch or configured_limit(MAX_BATCH_ENV, DEFAULT_MAX_BATCH)
        self.hosts = allowed_hosts(hosts)
        self.max_json_depth = max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if "*" not in self.hosts and host_name(scope) not in self.hosts:
            detail = (
                f"host {host_name(scope)!r} is not served here; allowed: {sorted(self.hosts)} "
                f"(add names with --allow-host or {ALLOWED_HOSTS_ENV})"
            )
            await self._refuse(send, 421, detail)
            return
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        if not _is_json(scope):
            await self._refuse(
                send, 415, "request bodies must be JSON (Content-Type: application/json)"
            )
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await self._refuse(send, 413, self._too_large(f"{declared} bytes"))
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            body.extend(message.get("body", b""))
            if len(body) > self.max_body_bytes:
                await self._refuse(send, 413, self._too_large(f"over {self.max_body_bytes} bytes"))
                return
            if not message.get("more_body", False):
                break
        if json_depth_exceeds(bytes(body), self.max_json_depth):
            detail = f"the JSON body nests deeper than {self.max_json_depth} levels"
            await self._refuse(send, 422, detail)
            return
        if scope["path"].rstrip("/").endswith("/batch"):
            inputs = _batch_size(bytes(body))
            if inputs is not None and inputs > self.max_batch:
                detail = (
                    f"a batch of {inputs} inputs; the limit is {self.max_batch} "
                    f"(set {MAX_BATCH_ENV} to change it)"
                )
                await self._refuse(send, 422, detail)
                return
        await self.app(scope, _replay(bytes(body), receive), send)

    def _too_large(self, size: str) -> str:
        return (
            f"the request body is {size}; the limit is {self.max_body_bytes} bytes "
            f"(set {MAX_BODY_BYTES_ENV} to change it)"
        )

    @staticmethod
    async def _refuse(send: Send, status: int, detail: str) -> None:
        payload = json.dumps({"detail": detail}).encode("utf-8")
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode("ascii")),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


def limit_requests(
    app: Any,
    *,
    max_body_bytes: int | None = None,
    max_batch: int | None = None,
    hosts: Iterable[str] = (),
) -> Any:
    """Add :class:`RequestLimits` and a 422 handler for invalid inputs to a FastAPI ``app``.

    Limits left None come from ``RAG_FUSION_MAX_BODY_BYTES`` / ``RAG_FUSION_MAX_BATCH`` (1 MB and
    32 inputs by default); ``hosts`` adds Host names to the loopback ones. Returns ``app``.
    """
    from pydantic import ValidationError

    app.add_middleware(
        RequestLimits, max_body_bytes=max_body_bytes, max_batch=max_batch, hosts=tuple(hosts)
    )
    app.add_exception_handler(ValidationError, _invalid_input)
    return app


async def _invalid_input(request: Any, error: Exception) -> Any:
    """422 with pydantic's messages (no input echoed back, no traceback)."""
    from fastapi.responses import JSONResponse

    errors = error.errors(include_url=False, include_input=False)  # type: ignore[attr-defined]
    return JSONResponse(
        status_code=422, content={"detail": json.loads(json.dumps(errors, default=str))}
    )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _batch_size(body: bytes) -> int | None:
    """The number of ``inputs`` of a LangServe batch body; None if it has no such list."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None  # LangServe answers 422 to it
    inputs = payload.get("inputs") if isinstance(payload, dict) else None
    return len(inputs) if isinstance(inputs, list) else None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the client's later messages."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


__all__ = [
    "ALLOWED_HOSTS_ENV",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_JSON_DEPTH",
    "LOOPBACK_HOSTS",
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_BATCH_ENV",
    "MAX_BODY_BYTES_ENV",
    "RequestLimits",
    "allowed_hosts",
    "configured_limit",
    "host_name",
    "json_depth_exceeds",
    "limit_requests",
]
