"""A LangSmith API stand-in for tests: it records the runs the langsmith SDK sends, on 127.0.0.1.

It answers what tracing needs: ``GET /info`` (which also tells the SDK how to send: multipart,
zstd-compressed multipart or JSON batches), ``POST /runs``, ``PATCH /runs/<id>``,
``POST /runs/batch`` and ``POST /runs/multipart``. Every request is kept with its decoded body, so
a test can search the exact bytes that left the process; runs are merged by id (creation, then
updates) into plain dicts.

>>> with LangSmithRecorder() as recorder:
...     # Client(api_url=recorder.url, api_key="fake") or LANGSMITH_ENDPOINT=recorder.url
...     recorder.runs
{}
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email import policy
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Run = dict[str, Any]

MULTIPART = "multipart"
BATCH = "batch"
COMPRESSED = "compressed"
INGEST_MODES = (MULTIPART, BATCH, COMPRESSED)
"""How the recorder asks the SDK to send runs (the SDK reads it from ``/info``)."""

_RUN_PATH = re.compile(r"^/runs/(?P<id>[0-9a-fA-F-]{36})$")


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the recorder received it, body decompressed."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: bytes


def info_payload(ingest: str) -> dict[str, Any]:
    """The ``/info`` answer that makes the SDK send runs the ``ingest`` way."""
    return {
        "version": "0.0.0-recorder",
        "batch_ingest_config": {
            "use_multipart_endpoint": ingest != BATCH,
            "size_limit": 100,
            "size_limit_bytes": 20_000_000,
            "scale_up_nthreads_limit": 4,
            "scale_up_qsize_trigger": 1000,
            "scale_down_nempty_trigger": 4,
        },
        "instance_flags": {"zstd_compression_enabled": ingest == COMPRESSED},
    }


def decompress_zstd(body: bytes) -> bytes:
    """Decode a zstd stream (frames without a declared size included)."""
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj().decompress(body)


def multipart_parts(content_type: str, body: bytes) -> Iterator[tuple[str, bytes]]:
    """``(name, payload)`` of each part of a ``multipart/form-data`` body."""
    message = BytesParser(policy=policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        yield str(name), part.get_payload(decode=True) or b""


class LangSmithRecorder:
    """Records traced runs; start with ``with LangSmithRecorder() as recorder:``.

    ``ingest`` is one of :data:`INGEST_MODES`; whatever it says, every ingest endpoint is
    accepted.
    """

    def __init__(self, *, ingest: str = MULTIPART) -> None:
        if ingest not in INGEST_MODES:
            raise ValueError(f"ingest must be one of {INGEST_MODES}; got {ingest!r}")
        self.ingest = ingest
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self._requests: list[RecordedRequest] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> LangSmithRecorder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LangSmithRecorder:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The API URL to give the SDK (``LANGSMITH_ENDPOINT`` or ``Client(api_url=...)``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # ---------------------------------------------------------------- what was recorded

    @property
    def runs(self) -> dict[str, Run]:
        """Runs by id, each the merge of its creation and updates (a snapshot)."""
        with self._lock:
            return {run_id: dict(run) for run_id, run in self._runs.items()}

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def payload(self) -> bytes:
        """Every request body received, decompressed, joined: what left the traced process."""
        return b"\n".join(request.body for request in self.requests)

    def reset(self) -> None:
        with self._lock:
            self._runs.clear()
            self._requests.clear()

    def wait_for(self, condition: Callable[[dict[str, Run]], bool], timeout: float = 30.0) -> bool:
        """Poll until ``condition(runs)`` holds; False after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition(self.runs):
                return True
            time.sleep(0.05)
        return condition(self.runs)

    # ---------------------------------------------------------------- recording

    def record_request(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def apply(self, run_id: str, fields: dict[str, Any]) -> None:
        """Merge ``fields`` into the run ``run_id`` (None never overwrites a value)."""
        with self._lock:
            run = self._runs.setdefault(str(run_id), {"id": str(run_id)})
            run.update({key: value for key, value in fields.items() if value is not None})

    def apply_batch(self, body: dict[str, Any]) -> None:
        """A ``/runs/batch`` body: ``{"post": [run, ...], "patch": [run, ...]}``."""
        for operation in ("post", "patch"):
            for run in body.get(operation) or []:
                self.apply(run["id"], run)

    def apply_multipart(self, content_type: str, body: bytes) -> None:
        """A ``/runs/multipart`` body: parts ``post.<id>``, ``patch.<id>.<field>``, ...

        The part without a field holds the run's main fields; ``inputs``, ``outputs``,
        ``extra``, ``events``, ``error`` and ``serialized`` come in parts of their own;
        ``attachment.<id>.<name>`` parts are kept as bytes under ``attachments``.
        """
        for name, payload in multipart_parts(content_type, body):
            kind, run_id, *field = name.split(".", 2)
            if kind in ("post", "patch"):
                value = json.loads(payload)
                self.apply(run_id, {field[0]: value} if field else value)
            elif kind == "attachment":
                with self._lock:
                    run = self._runs.setdefault(run_id, {"id": run_id})
                    run.setdefault("attachments", {})[field[0]] = payload


def _handler_for(recorder: LangSmithRecorder) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to ``recorder``."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base class name
            """Quiet."""

        def _read_body(self) -> bytes:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding", "").lower() == "zstd":
                body = decompress_zstd(body)
            return body

        def _record(self) -> bytes:
            body = self._read_body()
            headers = {name.lower(): value for name, value in self.headers.items()}
            recorder.record_request(RecordedRequest(self.command, self.path, headers, body))
            return body

        def _reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # sender is gone
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        def do_GET(self) -> None:
            self._record()
            if self.path.split("?")[0].rstrip("/") == "/info":
                self._reply(200, info_payload(recorder.ingest))
            else:
                self._reply(404, {"detail": "not found"})

        def do_POST(self) -> None:
            body = self._record()
            path = self.path.split("?")[0].rstrip("/")
            if path == "/runs":
                run = json.loads(body)
                recorder.apply(run["id"], run)
            elif path == "/runs/batch":
                recorder.apply_batch(json.loads(body))
            elif path == "/runs/multipart":
                recorder.apply_multipart(self.headers["Content-Type"], body)
            else:
                self._reply(404, {"detail": "not found"})
                return
            self._reply(202, {})

        def do_PATCH(self) -> None:
            body = self._record()
            match = _RUN_PATH.match(self.path.split("?")[0])
            if match is None:
                self._reply(404, {"detail": "not found"})
                return
            recorder.apply(match["id"], json.loads(body))
            self._reply(202, {})

    return Handler
