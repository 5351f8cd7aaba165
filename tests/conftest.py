"""Shared fixtures: local servers (127.0.0.1 only, always stopped), environment, models.

Sections: servers · environment · models. Add new fixtures to the matching section and keep
helpers that grow beyond a few lines in their own ``tests/<name>.py`` module.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.stub_openai import StubOpenAI

STUB_API_KEY = "sk-stub-test-key"
STUB_CHAT_MODEL = "stub-chat"
MODEL_ENVIRONMENT_VARIABLES = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "RAG_FUSION_CHAT_MODEL",
    "RAG_FUSION_EMBEDDING",
)

# ============================================================================================
# Servers
# ============================================================================================


@pytest.fixture(scope="session")
def openai_stub() -> Iterator[StubOpenAI]:
    """One OpenAI-compatible stub server for the session (see tests/stub_openai.py).

    Shared state: call ``openai_stub.reset()`` first, or use ``clean_openai_stub``.
    """
    with StubOpenAI() as stub:
        yield stub


@pytest.fixture
def clean_openai_stub(openai_stub: StubOpenAI) -> Iterator[StubOpenAI]:
    """The session stub, reset before and after the test."""
    openai_stub.reset()
    yield openai_stub
    openai_stub.reset()


@dataclass
class Page:
    """A response of :class:`StaticSite`."""

    body: bytes
    content_type: str = "text/html; charset=utf-8"
    status: int = 200
    delay: float = 0.0
    declare_length: bool = True
    """False sends no Content-Length: the body ends when the connection closes."""


class StaticSite:
    """A tiny web server on 127.0.0.1 answering GET with pages added by the test; ``requests``
    counts the GETs of each path."""

    def __init__(self) -> None:
        self.pages: dict[str, Page] = {}
        self.requests: Counter[str] = Counter()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.requests[self.path] += 1
                page = site.pages.get(self.path, Page(b"not found", "text/plain", 404))
                time.sleep(page.delay)
                self.send_response(page.status)
                self.send_header("Content-Type", page.content_type)
                if page.declare_length:
                    self.send_header("Content-Length", str(len(page.body)))
                self.end_headers()
                self.wfile.write(page.body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                """Quiet."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def add(self, path: str, body: str | bytes, **options: Any) -> str:
        """Serve ``body`` at ``path`` (options: the fields of :class:`Page`); return its URL."""
        self.pages[path] = Page(body.encode() if isinstance(body, str) else body, **options)
        return self.url(path)

    def url(self, path: str) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{path}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def static_site() -> Iterator[StaticSite]:
    """A local web server for loader tests: ``url = static_site.add("/page.html", html)``."""
    site = StaticSite()
    site.start()
    try:
        yield site
    finally:
        site.stop()


# ============================================================================================
# Environment
# ============================================================================================


@pytest.fixture
def clean_model_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No model configuration from the developer's shell leaks into the test."""
    for name in MODEL_ENVIRONMENT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def openai_env(clean_model_env: pytest.MonkeyPatch, clean_openai_stub: StubOpenAI) -> StubOpenAI:
    """The environment points at the (reset) stub: ``models.chat_model()`` resolves to it."""
    clean_model_env.setenv("OPENAI_BASE_URL", clean_openai_stub.base_url)
    clean_model_env.setenv("OPENAI_API_KEY", STUB_API_KEY)
    clean_model_env.setenv("RAG_FUSION_CHAT_MODEL", STUB_CHAT_MODEL)
    return clean_openai_stub


# ============================================================================================
# Models
# ============================================================================================


@pytest.fixture(scope="session")
def minilm() -> Any:
    """The real offline all-MiniLM-L6-v2 embeddings (loaded once; ~20 s the first time)."""
    from rag_fusion_chain import models

    return models.minilm_embeddings()


# ============================================================================================
# LangSmith recorder (a server: tests/langsmith_recorder.py)
# ============================================================================================

from tests.langsmith_recorder import MULTIPART, LangSmithRecorder  # noqa: E402


@pytest.fixture
def langsmith_recorder(request: pytest.FixtureRequest) -> Iterator[LangSmithRecorder]:
    """A LangSmith API stand-in on 127.0.0.1 recording traced runs; always stopped.

    Parametrize it indirectly with an ingest mode (``"multipart"``, ``"batch"``,
    ``"compressed"``) to choose how the SDK sends runs; multipart by default.
    """
    with LangSmithRecorder(ingest=getattr(request, "param", MULTIPART)) as recorder:
        yield recorder


# ============================================================================================
# Index signing key (never the developer's own)
# ============================================================================================


@pytest.fixture(scope="session", autouse=True)
def index_signing_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """FAISS manifests are signed with a key in a temporary directory, for the whole session.

    ``RAG_FUSION_INDEX_KEY_FILE`` is set in the environment, so subprocesses (the CLI, served
    apps) use the same key; the key file is made by the first save.
    """
    from rag_fusion_chain.retrievers.signing import SIGNING_KEY_ENV

    path = tmp_path_factory.mktemp("index-signing") / "index-signing.key"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SIGNING_KEY_ENV, str(path))
        yield path


@pytest.fixture(autouse=True)
def fresh_langserve_schemas() -> Iterator[None]:
    """LangServe keeps one registry of schema models per process, keyed by the runnable's name; a
    second app serving another chain of the same name (another test's) gets a renamed model that
    rejects valid output. Each test's apps start from an empty registry, as a served process does."""
    import sys

    handler = sys.modules.get("langserve.api_handler")
    if handler is not None:
        handler._SEEN_NAMES.clear()
        handler._MODEL_REGISTRY.clear()
    yield
