"""Request limits for an HTTP app serving the kit's chains: hosts, origins, JSON bodies, sizes.

:class:`RequestLimits` is a plain ASGI middleware. Before the chain sees a request it answers

* ``400`` to a ``Host`` that is not served: only the loopback names (``localhost``,
  ``127.0.0.1``, ``[::1]``, any port) unless more are allowed (``RAG_FUSION_ALLOWED_HOSTS``,
  comma-separated, or ``rag-fusion serve --allow-host``), so a page that rebinds its DNS name to
  127.0.0.1 cannot read answers; ``403`` to an ``Origin`` that is not a served host;
* ``415`` to a POST whose body is not ``application/json`` (a cross-site "simple" POST is
  ``text/plain``);
* ``413`` to a body over ``max_body_bytes`` (default 1 MB, ``RAG_FUSION_MAX_BODY_BYTES``), without
  reading past the limit; ``400`` to JSON nested deeper than :data:`MAX_JSON_DEPTH`;
* ``422`` to a LangServe ``/batch`` request with more than ``max_batch`` inputs (default 32,
  ``RAG_FUSION_MAX_BATCH``).

Every refusal is a JSON ``{"detail": ...}`` naming the limit and the setting that changes it.
:func:`limit_requests` adds it to an app together with a handler that answers 422 (not 500) to an
invalid input inside a batch, which LangServe validates outside its own error translation.
``rag-fusion serve`` does this; in an app made by ``langchain app new``, add it to
``app/server.py``:

>>> from fastapi import FastAPI  # doctest: +SKIP
>>> app = FastAPI()  # doctest: +SKIP
>>> limit_requests(app, allowed_hosts=["my-server.example"])  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

MAX_BODY_BYTES_ENV = "RAG_FUSION_MAX_BODY_BYTES"
MAX_BATCH_ENV = "RAG_FUSION_MAX_BATCH"
DEFAULT_MAX_BODY_BYTES = 1_000_000
DEFAULT_MAX_BATCH = 32
ALLOWED_HOSTS_ENV = "RAG_FUSION_ALLOWED_HOSTS"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
"""The Host names always served; others only when allowed (a defence against DNS rebinding)."""
MAX_JSON_DEPTH = 64
"""How deep a request body's JSON may nest (a LangServe request needs about 6)."""
_TOO_DEEP = object()

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
    """ASGI middleware refusing foreign hosts (400) and origins (403), non-JSON bodies (415),
    oversized bodies (413), JSON nested too deep (400) and oversized LangServe batches (422)."""

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int | None = None,
        max_batch: int | None = None,
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.allowed_hosts = allowed_host_names(allowed_hosts)
        self.max_body_bytes = max_body_bytes or configured_limit(
            MAX_BODY_BYTES_ENV, DEFAULT_MAX_BODY_BYTES
        )
        self.max_batch = max_batch or configured_limit(MAX_BATCH_ENV, DEFAULT_MAX_BATCH)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refusal = self._foreign(headers)
        if refusal is not None:
            await self._refuse(send, *refusal)
            return
        if scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        media_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != "application/json":
            detail = f"the request body must be application/json; got {media_type or 'none'!r}"
            await self._refuse(send, 415, detail)
            return
        declared = _content_length(headers)
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
        payload = _parsed(bytes(body))
        if payload is _TOO_DEEP or json_depth(payload) > MAX_JSON_DEPTH:
            await self._refuse(send, 400, f"the JSON body nests deeper than {MAX_JSON_DEPTH}")
            return
        if scope["path"].rstrip("/").endswith("/batch"):
            inputs = _batch_size(payload)
            if inputs is not None and inputs > self.max_batch:
                detail = (
                    f"a batch of {inputs} inputs; the limit is {self.max_batch} "
                    f"(set {MAX_BATCH_ENV} to change it)"
                )
                await self._refuse(send, 422, detail)
                return
        await self.app(scope, _replay(bytes(body), receive), send)

    def _foreign(self, headers: Mapping[str, str]) -> tuple[int, str] | None:
        """Why a request from elsewhere is refused (a DNS-rebinding Host, a cross-site Origin)."""
        host = host_name(headers.get("host", ""))
        if host not in self.allowed_hosts:
            return 400, (
                f"the Host {host!r} is not served here (set {ALLOWED_HOSTS_ENV} or "
                "--allow-host to add a name)"
            )
        origin = headers.get("origin")
        if origin is not None and host_name(urlsplit(origin).netloc) not in self.allowed_hosts:
            return 403, "cross-site requests are refused (the Origin is not a served host)"
        return None

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
    allowed_hosts: Iterable[str] = (),
) -> Any:
    """Add :class:`RequestLimits` and a 422 handler for invalid inputs to a FastAPI ``app``.

    Limits left None come from ``RAG_FUSION_MAX_BODY_BYTES`` / ``RAG_FUSION_MAX_BATCH`` (1 MB and
    32 inputs by default); ``allowed_hosts`` add to the loopback names and
    ``RAG_FUSION_ALLOWED_HOSTS``. Returns ``app``.
    """
    from pydantic import ValidationError

    app.add_middleware(
        RequestLimits,
        max_body_bytes=max_body_bytes,
        max_batch=max_batch,
        allowed_hosts=tuple(allowed_hosts),
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


def allowed_host_names(extra: Iterable[str] = ()) -> frozenset[str]:
    """The loopback names, ``RAG_FUSION_ALLOWED_HOSTS`` (comma-separated) and ``extra``, lowercased.

    >>> sorted(allowed_host_names(["Example.org"]))
    ['127.0.0.1', '::1', 'example.org', 'localhost']
    """
    configured = os.environ.get(ALLOWED_HOSTS_ENV, "").split(",")
    names = {host_name(name) for name in (*LOOPBACK_HOSTS, *configured, *extra) if name.strip()}
    return frozenset(names)


def host_name(host: str) -> str:
    """The name of a ``Host`` header value, without its port or IPv6 brackets, lowercased.

    >>> host_name("[::1]:8000"), host_name("LocalHost:80"), host_name("127.0.0.1")
    ('::1', 'localhost', '127.0.0.1')
    """
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def json_depth(value: Any) -> int:
    """How deep lists and objects nest in a parsed JSON ``value`` (0 for a scalar), iteratively.

    >>> json_depth({"input": [[1]]})
    3
    """
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _headers(scope: Scope) -> dict[str, str]:
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", [])
    }


def _content_length(headers: Mapping[str, str]) -> int | None:
    try:
        return int(headers["content-length"])
    except (KeyError, ValueError):
        return None


def _parsed(body: bytes) -> Any:
    """The JSON body, :data:`_TOO_DEEP` when it nests past the parser's recursion, None if invalid
    (LangServe answers 422 to it)."""
    try:
        return json.loads(body)
    except RecursionError:
        return _TOO_DEEP
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def _batch_size(payload: Any) -> int | None:
    """The number of ``inputs`` of a LangServe batch body; None if it has no such list."""
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
    "LOOPBACK_HOSTS",
    "MAX_JSON_DEPTH",
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_BATCH_ENV",
    "MAX_BODY_BYTES_ENV",
    "RequestLimits",
    "allowed_host_names",
    "configured_limit",
    "host_name",
    "json_depth",
    "limit_requests",
]
