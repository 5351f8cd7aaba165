"""A small OpenAI-compatible HTTP server for tests: chat completions (plain and SSE) and embeddings.

It runs on 127.0.0.1 in a background thread, counts and records every request, and lets a test
script the replies, slow them down, or make the next requests fail:

>>> with StubOpenAI() as stub:
...     stub.script(["1. solar power\\n2. wind power"])
...     # ChatOpenAI(base_url=stub.base_url, api_key="sk-test", model="stub").invoke("hi")
...     stub.counts["chat"]
0

Embeddings are deterministic bag-of-words vectors (each word hashes to a fixed random direction),
so texts that share words are close: good enough for retrieval tests, never for quality claims.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Message = dict[str, Any]
ReplyFunction = Callable[[list[Message]], str]

CHAT_ENDPOINT = "chat"
EMBEDDINGS_ENDPOINT = "embeddings"
_ROUTES = {"/v1/chat/completions": CHAT_ENDPOINT, "/v1/embeddings": EMBEDDINGS_ENDPOINT}
_ERROR_TYPES = {429: "rate_limit_exceeded", 500: "server_error", 503: "server_error"}
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass
class RecordedRequest:
    """One request as the stub received it."""

    endpoint: str
    body: dict[str, Any]
    headers: dict[str, str]
    """Header names in lower case."""


@dataclass
class _InjectedFailure:
    status: int
    endpoint: str | None
    remaining: int


@dataclass
class _State:
    replies: list[str] = field(default_factory=list)
    reply_function: ReplyFunction | None = None
    failures: list[_InjectedFailure] = field(default_factory=list)
    requests: list[RecordedRequest] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    embedding_batch_sizes: list[int] = field(default_factory=list)
    request_delay: float = 0.0
    token_delay: float = 0.0


def default_reply(messages: list[Message]) -> str:
    """The reply when nothing is scripted: an echo of the last user message, marked as a stub."""
    user_texts = [_text_of(message) for message in messages if message.get("role") == "user"]
    return f"Stub answer about: {user_texts[-1] if user_texts else ''}".strip()


def stub_embedding(text: str | list[int], dimensions: int = 64) -> list[float]:
    """A deterministic unit vector: the normalised sum of one hash-seeded direction per word.

    Token-id lists (which OpenAIEmbeddings sends when it checks context length) count each id as a
    word: deterministic too, though not equal to the vector of the same text sent as a string.
    """
    words = (
        [str(token) for token in text] if isinstance(text, list) else _WORD.findall(text.lower())
    )
    vector = [0.0] * dimensions
    for word in words or [""]:
        generator = random.Random(hashlib.sha256(word.encode()).digest())
        for index in range(dimensions):
            vector[index] += generator.gauss(0.0, 1.0)
    norm = sum(value * value for value in vector) ** 0.5 or 1.0
    return [value / norm for value in vector]


def split_into_pieces(text: str) -> list[str]:
    """Split a reply into streaming pieces (a word and its trailing space each), at least one."""
    return re.findall(r"\S+\s*|\s+", text) or [""]


class StubOpenAI:
    """An OpenAI-compatible server on 127.0.0.1 for tests; use as a context manager or start/stop.

    Public surface: ``base_url``, ``script()``, ``fail_next()``, ``set_delay()``, ``reset()``,
    ``requests``, ``counts``, ``embedding_batch_sizes``, ``chat_requests``.
    """

    def __init__(self, *, embedding_dimensions: int = 64, model_name: str = "stub-model") -> None:
        self.embedding_dimensions = embedding_dimensions
        self.model_name = model_name
        self._lock = threading.Lock()
        self._state = _State()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> StubOpenAI:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread."""
        handler = type("BoundHandler", (_Handler,), {"stub": self})
        self._server = _StubServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # quick shutdown
            name="stub-openai",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port; safe to call twice."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> StubOpenAI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """The ``/v1`` base URL to give an OpenAI client."""
        if self._server is None:
            raise RuntimeError("the stub server is not running; call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    # ---- scripting ---------------------------------------------------------------------------

    def script(self, replies: Iterable[str] | ReplyFunction) -> None:
        """Queue reply texts (used in order, then the default echo) or set a function of messages."""
        with self._lock:
            if callable(replies):
                self._state.reply_function = replies
            else:
                self._state.replies.extend(replies)

    def fail_next(self, count: int = 1, *, status: int = 500, endpoint: str | None = None) -> None:
        """Answer the next ``count`` requests (to ``endpoint``: "chat"/"embeddings", or any) with
        an OpenAI-style error of HTTP ``status``; a ``retry-after-ms: 1`` header keeps retries fast."""
        with self._lock:
            self._state.failures.append(_InjectedFailure(status, endpoint, count))

    def set_delay(self, *, request: float = 0.0, token: float = 0.0) -> None:
        """Wait ``request`` seconds before answering, and ``token`` seconds between stream chunks."""
        with self._lock:
            self._state.request_delay = request
            self._state.token_delay = token

    def reset(self) -> None:
        """Forget scripts, failures, delays, recorded requests and counts."""
        with self._lock:
            self._state = _State()

    # ---- observations ------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received (failed ones included), oldest first."""
        with self._lock:
            return list(self._state.requests)

    @property
    def counts(self) -> Counter[str]:
        """Requests received per endpoint: ``counts["chat"]``, ``counts["embeddings"]``."""
        with self._lock:
            return Counter(self._state.counts)

    @property
    def embedding_batch_sizes(self) -> list[int]:
        """The number of inputs of each successful embeddings request, in order."""
        with self._lock:
            return list(self._state.embedding_batch_sizes)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """The bodies of the chat completion requests, oldest first."""
        return [request.body for request in self.requests if request.endpoint == CHAT_ENDPOINT]

    # ---- used by the handler -----------------------------------------------------------------

    def _record(self, endpoint: str, body: dict[str, Any], headers: dict[str, str]) -> int | None:
        """Record a request; return the HTTP status of an injected failure, if one applies."""
        with self._lock:
            self._state.requests.append(RecordedRequest(endpoint, body, headers))
            self._state.counts[endpoint] += 1
            for failure in self._state.failures:
                if failure.remaining > 0 and failure.endpoint in (None, endpoint):
                    failure.remaining -= 1
                    return failure.status
            return None

    def _next_reply(self, messages: list[Message]) -> str:
        with self._lock:
            if self._state.replies:
                return self._state.replies.pop(0)
            reply_function = self._state.reply_function
        return (reply_function or default_reply)(messages)

    def _delays(self) -> tuple[float, float]:
        with self._lock:
            return self._state.request_delay, self._state.token_delay

    def _count_embedding_batch(self, size: int) -> None:
        with self._lock:
            self._state.embedding_batch_sizes.append(size)


class _StubServer(ThreadingHTTPServer):
    """A threading server whose listen backlog takes a burst of concurrent clients.

    The default backlog (5) drops connections beyond it: clients then stall for a second
    (SYN retransmission) or see a reset, which load tests with tens of clients hit at once.
    """

    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet when a client drops its connection: closing a pool resets idle ones."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Routes POST requests to the stub; HTTP/1.1 with keep-alive and chunked SSE streams."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    """Headers and body go out in separate writes; with Nagle each reply waits ~40 ms for an ACK."""
    stub: StubOpenAI

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base class name
        """Stay quiet: test output is for test failures."""

    def do_POST(self) -> None:
        endpoint = _ROUTES.get(self.path.split("?")[0])
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length)
        if endpoint is None:
            self._send_error(404, f"no route for {self.path}")
            return
        try:
            body = json.loads(raw_body or b"{}")
        except json.JSONDecodeError as error:
            self._send_error(400, f"invalid JSON body: {error}")
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        failure = self.stub._record(endpoint, body, headers)
        request_delay, token_delay = self.stub._delays()
        time.sleep(request_delay)
        if failure is not None:
            self._send_error(failure, f"injected failure {failure}")
        elif endpoint == EMBEDDINGS_ENDPOINT:
            try:
                self._send_json(200, self._embeddings(body))
            except ValueError as error:
                self._send_error(400, str(error))
        elif body.get("stream"):
            self._stream_chat(body, token_delay)
        else:
            self._send_json(200, self._chat_completion(body))

    # ---- responses ---------------------------------------------------------------------------

    def _chat_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages") or []
        reply = self.stub._next_reply(messages)
        return {
            "id": f"chatcmpl-stub-{self.stub.counts[CHAT_ENDPOINT]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.stub.model_name),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": _usage(messages, reply),
        }

    def _stream_chat(self, body: dict[str, Any], token_delay: float) -> None:
        messages = body.get("messages") or []
        reply = self.stub._next_reply(messages)
        base = {
            "id": f"chatcmpl-stub-{self.stub.counts[CHAT_ENDPOINT]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", self.stub.model_name),
        }
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in _stream_events(base, reply, messages, body):
                self._write_chunk(f"data: {json.dumps(event)}\n\n")
                time.sleep(token_delay)
            self._write_chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading
            self.close_connection = True

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = _embedding_inputs(body.get("input"))
        self.stub._count_embedding_batch(len(inputs))
        dimensions = int(body.get("dimensions") or self.stub.embedding_dimensions)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(inputs):
            vector: Any = stub_embedding(text, dimensions)
            if as_base64:
                vector = base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        tokens = sum(len(text) if isinstance(text, list) else len(text.split()) for text in inputs)
        return {
            "object": "list",
            "data": data,
            "model": body.get("model", self.stub.model_name),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    # ---- wire helpers ------------------------------------------------------------------------

    def _write_chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, status: int, message: str) -> None:
        error_type = _ERROR_TYPES.get(status, "invalid_request_error")
        payload = {"error": {"message": message, "type": error_type, "code": error_type}}
        self._send_json(status, payload, {"retry-after-ms": "1"})


def _stream_events(
    base: dict[str, Any], reply: str, messages: list[Message], body: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """The chunks of a streamed reply: role, one piece per word, finish, then usage if asked."""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return {**base, "choices": [choice]}

    yield chunk({"role": "assistant", "content": ""})
    for piece in split_into_pieces(reply):
        yield chunk({"content": piece})
    yield chunk({}, "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        yield {**base, "choices": [], "usage": _usage(messages, reply)}


def _embedding_inputs(value: Any) -> list[str | list[int]]:
    """Normalise ``input``: a string, a list of strings, a token-id list or a list of those."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, int) for item in value):
        return [value]
    if isinstance(value, list):
        return list(value)
    raise ValueError(f"unsupported embeddings input: {value!r}")


def _text_of(message: Message) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def _usage(messages: list[Message], reply: str) -> dict[str, int]:
    prompt_tokens = sum(len(_text_of(message).split()) for message in messages)
    completion_tokens = len(reply.split())
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
