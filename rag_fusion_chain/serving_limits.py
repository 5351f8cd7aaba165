"""Request limits for an HTTP app serving the kit's chains: body size and batch size.

:class:`RequestLimits` is a plain ASGI middleware. It answers ``413`` to a request body over
``max_body_bytes`` (default 1 MB, ``RAG_FUSION_MAX_BODY_BYTES``) without reading past the limit,
and ``422`` to a LangServe ``/batch`` request with more than ``max_batch`` inputs (default 32,
``RAG_FUSION_MAX_BATCH``), before the chain sees either. Every refusal is a JSON ``{"detail":
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
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

MAX_BODY_BYTES_ENV = "RAG_FUSION_MAX_BODY_BYTES"
MAX_BATCH_ENV = "RAG_FUSION_MAX_BATCH"
DEFAULT_MAX_BODY_BYTES = 1_000_000
DEFAULT_MAX_BATCH = 32

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


class RequestLimits:
    """ASGI middleware refusing oversized bodies (413) and oversized LangServe batches (422)."""

    def __init__(
        self, app: ASGIApp, max_body_bytes: int | None = None, max_batch: int | None = None
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes or configured_limit(
            MAX_BODY_BYTES_ENV, DEFAULT_MAX_BODY_BYTES
        )
        self.max_batch = max_batch or configured_limit(MAX_BATCH_ENV, DEFAULT_MAX_BATCH)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
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
    app: Any, *, max_body_bytes: int | None = None, max_batch: int | None = None
) -> Any:
    """Add :class:`RequestLimits` and a 422 handler for invalid inputs to a FastAPI ``app``.

    Limits left None come from ``RAG_FUSION_MAX_BODY_BYTES`` / ``RAG_FUSION_MAX_BATCH`` (1 MB and
    32 inputs by default). Returns ``app``.
    """
    from pydantic import ValidationError

    app.add_middleware(RequestLimits, max_body_bytes=max_body_bytes, max_batch=max_batch)
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
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_BATCH_ENV",
    "MAX_BODY_BYTES_ENV",
    "RequestLimits",
    "configured_limit",
    "limit_requests",
]
