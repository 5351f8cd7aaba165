"""What ``rag-fusion serve`` and the LangChain templates serve: a strategy's chain over an index.

Each template under ``templates/`` exports ``chain = build_chain("<strategy>")`` (``{"question":
str}`` in, the answer ``str`` out, streamed) and ``sources_chain = build_chain("<strategy>",
return_sources=True)`` (the answer with its queries, documents and failures). Where they search
is read from the environment on first use (:meth:`IndexSource.from_environment`):

* ``RAG_FUSION_INDEX``: an index directory written by ``rag-fusion index`` (FAISS or Chroma);
* ``RAG_FUSION_CHROMA_URL`` (``http://host:port``) and ``RAG_FUSION_CHROMA_COLLECTION``: a
  collection on a running Chroma server (``chroma run``), client/server mode;
* neither: the SciFact sample shipped in :mod:`rag_fusion_chain.data`, indexed in memory from
  its shipped vectors (:mod:`rag_fusion_chain.data.vectors`) in seconds, or, with other
  embeddings or ``RAG_FUSION_VECTOR_STORE=chroma``, in a cache directory reused by later
  processes (``RAG_FUSION_CACHE_DIR``).

Models: ``RAG_FUSION_EMBEDDING`` (default: the index's own, MiniLM for the sample),
``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` and ``RAG_FUSION_CHAT_MODEL`` (see
:mod:`rag_fusion_chain.models`); with no chat model the chain is the offline one. Importing is
cheap: nothing is opened before the first call, and one line is logged when the index is ready.
Request limits for an HTTP app are in :mod:`rag_fusion_chain.serving_limits`.

>>> from rag_fusion_chain.serving import build_chain
>>> chain = build_chain("rag-fusion")  # nothing opened yet
>>> # chain.invoke({"question": "Is birth weight associated with breast cancer?"})
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Union
from urllib.parse import urlsplit

from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.utils import ConfigurableFieldSpec
from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    GetCoreSchemaHandler,
    PrivateAttr,
    StringConstraints,
    field_validator,
)
from pydantic_core import CoreSchema, core_schema

from rag_fusion_chain import chains, data, models, strategies, validation
from rag_fusion_chain.pipeline import K_FIELD, N_FIELD, TOP_N_FIELD
from rag_fusion_chain.validation import QuestionInput

if TYPE_CHECKING:
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings

    from rag_fusion_chain.retrievers.index_directory import OpenedIndex

INDEX_ENV = "RAG_FUSION_INDEX"
CHROMA_URL_ENV = "RAG_FUSION_CHROMA_URL"
CHROMA_COLLECTION_ENV = "RAG_FUSION_CHROMA_COLLECTION"
VECTOR_STORE_ENV = "RAG_FUSION_VECTOR_STORE"
CACHE_DIR_ENV = "RAG_FUSION_CACHE_DIR"
FAISS = "faiss"
CHROMA = "chroma"
VECTOR_STORES = (FAISS, CHROMA)
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "rag-fusion-chain" / "indexes"
"""Outside any repository, like the evaluation's embedding cache."""
DEFAULT_COLLECTION = "rag_fusion_chain"
"""The collection ``build_chroma`` writes by default."""
CHROMA_PAGE = 1000
"""Documents fetched per request when BM25 is built from a Chroma server's collection."""
CHROMA_TIMEOUT_SECONDS = 30.0
"""Bound of every request to a Chroma server."""
MAX_K = 100
"""Upper bound of ``k`` (documents per retriever call) in a request."""
MAX_TOP_N = 100
"""Upper bound of ``top_n`` (fused documents kept) in a request."""

logger = logging.getLogger(__name__)


class Question(BaseModel):
    """The input of a served chain: a question with something visible, at most 20,000 characters."""

    question: str = Field(
        min_length=1,
        max_length=validation.MAX_QUESTION_CHARS,
        description="The question to answer from the indexed documents",
    )

    @field_validator("question")
    @classmethod
    def _visible_text(cls, value: str) -> str:
        return validation.question_of(value)


QuestionText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=validation.MAX_QUESTION_CHARS),
    AfterValidator(validation.question_of),
]
"""The question itself, as library chains take it (``.invoke("...")``), with the same checks."""


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


def vector_store_kind() -> str:
    """``RAG_FUSION_VECTOR_STORE`` (``faiss`` or ``chroma``), ``faiss`` when unset.

    >>> vector_store_kind()  # with nothing set
    'faiss'
    """
    kind = (os.environ.get(VECTOR_STORE_ENV) or FAISS).strip().lower()
    if kind not in VECTOR_STORES:
        raise ValueError(
            f"{VECTOR_STORE_ENV} must be one of {', '.join(VECTOR_STORES)}; got {kind!r}"
        )
    return kind


def cache_directory() -> Path:
    """``RAG_FUSION_CACHE_DIR``, else :data:`DEFAULT_CACHE_DIR`."""
    configured = os.environ.get(CACHE_DIR_ENV)
    return Path(configured).expanduser() if configured else DEFAULT_CACHE_DIR


@dataclass(frozen=True)
class IndexSource:
    """Where a served chain searches: an index directory, a Chroma server, or (neither) the sample.

    >>> IndexSource(chroma_url="http://127.0.0.1:8000").describe()
    "Chroma collection 'rag_fusion_chain' at http://127.0.0.1:8000"
    """

    index: Path | None = None
    chroma_url: str | None = None
    chroma_collection: str = DEFAULT_COLLECTION

    def __post_init__(self) -> None:
        if self.index is not None and self.chroma_url is not None:
            raise ValueError(
                f"give an index directory ({INDEX_ENV}, --index) or a Chroma server "
                f"({CHROMA_URL_ENV}, --chroma-url), not both"
            )
        if self.chroma_url is not None:
            chroma_address(self.chroma_url)
        if not self.chroma_collection.strip():
            raise ValueError(f"the Chroma collection name ({CHROMA_COLLECTION_ENV}) is empty")

    @classmethod
    def from_environment(
        cls,
        *,
        index: str | os.PathLike[str] | None = None,
        chroma_url: str | None = None,
        chroma_collection: str | None = None,
    ) -> IndexSource:
        """``RAG_FUSION_INDEX``, ``RAG_FUSION_CHROMA_URL``, ``RAG_FUSION_CHROMA_COLLECTION``.

        Values given here (``rag-fusion serve``'s flags) win: an index or a URL given replaces
        both of the environment's.
        """
        if index is None and chroma_url is None:
            index = os.environ.get(INDEX_ENV, "").strip() or None
            chroma_url = os.environ.get(CHROMA_URL_ENV, "").strip() or None
        collection = chroma_collection or os.environ.get(CHROMA_COLLECTION_ENV, "").strip()
        return cls(
            index=Path(index).expanduser() if index else None,
            chroma_url=chroma_url or None,
            chroma_collection=collection or DEFAULT_COLLECTION,
        )

    def describe(self) -> str:
        """Where this source is, in words (never a secret: URLs lose any user info)."""
        if self.index is not None:
            return f"index {self.index}"
        if self.chroma_url is not None:
            host, port, https = chroma_address(self.chroma_url)
            scheme = "https" if https else "http"
            return f"Chroma collection {self.chroma_collection!r} at {scheme}://{host}:{port}"
        return "the bundled SciFact sample"


def chroma_address(url: str) -> tuple[str, int, bool]:
    """``(host, port, https)`` of a Chroma server URL such as ``http://127.0.0.1:8000``.

    >>> chroma_address("http://localhost:8001")
    ('localhost', 8001, False)
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"{CHROMA_URL_ENV} (--chroma-url) must look like http://host:port; got {url!r}"
        )
    try:
        port = parts.port
    except ValueError as error:
        raise ValueError(f"{CHROMA_URL_ENV} (--chroma-url): bad port in {url!r}") from error
    https = parts.scheme == "https"
    return parts.hostname, port or (443 if https else 8000), https


# --------------------------------------------------------------------------------------------
# Indexes
# --------------------------------------------------------------------------------------------


def index_directory(kind: str, corpus: Path, embeddings: Embeddings, cache_dir: Path) -> Path:
    """``<cache_dir>/<kind>-<digest>``, the digest naming the corpus content and the embeddings.

    A changed corpus or other embeddings get a new directory, never a stale index.
    """
    from rag_fusion_chain.retrievers.index_directory import INDEX_FORMAT
    from rag_fusion_chain.retrievers.stores import file_sha256

    identity = {
        "format": INDEX_FORMAT,
        "corpus_sha256": file_sha256(corpus),
        "embedding": models.embedding_identity(embeddings),
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return cache_dir / f"{kind}-{digest[:16]}"


def with_shipped_vectors(
    embeddings: Embeddings, documents: Sequence[Document] | None = None
) -> Embeddings | None:
    """``embeddings`` knowing the sample's shipped vectors, or None when those do not fit.

    ``documents``: the sample corpus when already loaded. Why the vectors do not fit (other
    embeddings, a changed corpus, missing files) is logged.
    """
    from rag_fusion_chain import ingest
    from rag_fusion_chain.data import vectors

    try:
        shipped = vectors.load_sample_vectors()
    except (OSError, ValueError, KeyError) as error:
        logger.info("the shipped sample vectors are not used: %s", error)
        return None
    if not vectors.vectors_fit(shipped.record, embeddings):
        logger.info(
            "the shipped sample vectors were made by %s, not %s: embedding the sample instead",
            shipped.record.get("embedding_identity"),
            models.embedding_identity(embeddings),
        )
        return None
    documents = documents or ingest.load([data.sample_corpus_path()])
    texts = [document.page_content for document in documents]
    return vectors.PrecomputedEmbeddings(embeddings, shipped.by_text(texts))


@functools.lru_cache(maxsize=4)
def sample_index(kind: str, cache_dir: Path, embedding: str) -> OpenedIndex:
    """BM25 and a vector store over the sample corpus (one per process and settings).

    With FAISS and embeddings that the shipped vectors fit, the store is built in memory from
    them (nothing embedded, nothing written). Otherwise the index directory
    (:mod:`rag_fusion_chain.retrievers.index_directory`, vector store ``kind``) is opened from
    ``cache_dir``, or built there first, one document per abstract. Builds are atomic: a
    concurrent or interrupted build never leaves a half-written index, and when another process
    wins the race its index is used.
    """
    from rag_fusion_chain import ingest
    from rag_fusion_chain.retrievers.bm25 import BM25Retriever
    from rag_fusion_chain.retrievers.index_directory import (
        INDEX_FILE,
        OpenedIndex,
        build_index,
        open_index,
    )
    from rag_fusion_chain.retrievers.stores import VectorRetriever, build_faiss

    corpus = data.sample_corpus_path()
    embeddings = models.embeddings(embedding)
    documents = ingest.load([corpus])
    shipped = with_shipped_vectors(embeddings, documents)
    if kind == FAISS and shipped is not None:
        return OpenedIndex(
            settings={"store": FAISS, "embedding": embedding, "source": "shipped vectors"},
            vectors=VectorRetriever(vectorstore=build_faiss(documents, shipped)),
            bm25=BM25Retriever.from_documents(documents),
        )
    directory = index_directory(kind, corpus, embeddings, cache_dir)
    if not (directory / INDEX_FILE).is_file():
        with contextlib.suppress(FileExistsError):  # another process built it meanwhile
            build_index(
                [corpus], directory, store=kind, embedding=shipped or embedding, chunk_size=None
            )
    return open_index(directory, embeddings)


def chroma_server_index(url: str, collection: str, embedding: str | None) -> OpenedIndex:
    """A collection on a Chroma server, with a BM25 index of its documents built in memory.

    BM25 drives the offline query step and keyword search; the collection's documents are read
    in pages of :data:`CHROMA_PAGE`. ``embedding`` must be what built the collection (default
    ``RAG_FUSION_EMBEDDING``, else MiniLM); a different one is warned about.
    """
    from langchain_core.documents import Document

    from rag_fusion_chain.retrievers.bm25 import BM25Retriever
    from rag_fusion_chain.retrievers.index_directory import OpenedIndex
    from rag_fusion_chain.retrievers.stores import VectorRetriever, load_chroma

    try:
        import chromadb
    except ImportError as error:
        raise ImportError(
            'a Chroma server needs chromadb: pip install "rag-fusion-chain[chroma]"'
        ) from error
    host, port, https = chroma_address(url)
    client = chromadb.HttpClient(
        host=host,
        port=port,
        ssl=https,
        settings=chromadb.config.Settings(),  # the defaults, as langchain_chroma uses
    )
    # chromadb's HTTP session waits forever; bound every request (private attribute, guarded).
    session = getattr(getattr(client, "_server", None), "_session", None)
    if session is not None:
        session.timeout = CHROMA_TIMEOUT_SECONDS
    store = load_chroma(models.embeddings(embedding), collection_name=collection, client=client)
    documents: list[Document] = []
    while True:
        page = store.get(
            limit=CHROMA_PAGE, offset=len(documents), include=["documents", "metadatas"]
        )
        for identifier, text, metadata in zip(
            page["ids"], page["documents"] or [], page["metadatas"] or [], strict=True
        ):
            documents.append(Document(text or "", metadata=dict(metadata or {}), id=identifier))
        if len(page["ids"]) < CHROMA_PAGE:
            break
    if not documents:
        raise ValueError(f"the Chroma collection {collection!r} at {url} holds no documents")
    return OpenedIndex(
        settings={"store": CHROMA, "embedding": embedding, "source": url},
        vectors=VectorRetriever(vectorstore=store),
        bm25=BM25Retriever.from_documents(documents),
    )


def open_source(
    source: IndexSource, embedding: str | None = None, *, trust: bool = False
) -> OpenedIndex:
    """The opened index of ``source``; one line is logged when it is ready.

    ``embedding`` overrides the embeddings recorded with an index (default
    ``RAG_FUSION_EMBEDDING``); ``trust`` loads a FAISS index this user did not sign.
    """
    from rag_fusion_chain.retrievers.index_directory import open_index

    show_progress()
    started = time.perf_counter()
    embedding = embedding or os.environ.get(models.EMBEDDING_ENV) or None
    if source.index is not None:
        opened = open_index(source.index, embedding, trust=trust)
    elif source.chroma_url is not None:
        opened = chroma_server_index(source.chroma_url, source.chroma_collection, embedding)
    else:
        opened = sample_index(
            vector_store_kind(), cache_directory(), embedding or models.DEFAULT_EMBEDDING
        )
    announce(
        f"rag-fusion-chain: {source.describe()} ready ({len(opened.bm25.documents)} documents, "
        f"{opened.settings.get('store')}) in {time.perf_counter() - started:.1f} s"
    )
    return opened


def announce(line: str) -> None:
    """Log ``line`` at INFO (see :func:`show_progress`)."""
    show_progress()
    logger.info(line)


def show_progress() -> None:
    """Show this module's INFO lines on stderr, unless the application configured logging."""
    if not logging.getLogger().handlers and not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def clear_cache() -> None:
    """Forget the indexes opened in this process (the next call opens them again)."""
    sample_index.cache_clear()
    _cached_source.cache_clear()


@functools.lru_cache(maxsize=4)
def _cached_source(source: IndexSource, embedding: str | None) -> OpenedIndex:
    return open_source(source, embedding)


def served_chain(
    strategy: str, source: IndexSource | None = None, *, return_sources: bool = False
) -> Runnable[QuestionInput, Any]:
    """The strategy's chain over ``source`` (default: the environment's) with the configured models.

    BM25 and the vector store are both searched; the opened index is shared by every chain of
    the process that searches the same source.
    """
    source = source or IndexSource.from_environment()
    opened = _cached_source(source, os.environ.get(models.EMBEDDING_ENV) or None)
    return chains.chain_for(
        strategy,
        [opened.bm25, opened.vectors],
        models.chat_model(),
        feedback=opened.bm25,
        return_sources=return_sources,
    )


# --------------------------------------------------------------------------------------------
# The exported chain
# --------------------------------------------------------------------------------------------


def _bounded(upper: int) -> Any:
    """An int type from 1 to ``upper`` that keeps its bounds wherever pydantic meets it.

    (LangServe rebuilds the config model from each field's annotation alone, so bounds given as
    ``Field(ge=..., le=...)`` or ``Annotated`` metadata would be dropped.)
    """

    def schema(cls: type, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.int_schema(ge=1, le=upper)

    return type(f"CountUpTo{upper}", (), {"__get_pydantic_core_schema__": classmethod(schema)})


BOUNDS = {N_FIELD.id: validation.MAX_QUERIES, K_FIELD.id: MAX_K, TOP_N_FIELD.id: MAX_TOP_N}
"""Upper bounds of the per-call settings a served chain accepts (the lower bound is 1)."""


def per_call_settings(strategy: str) -> list[ConfigurableFieldSpec]:
    """``n`` (where the strategy counts queries), ``k`` and ``top_n``, bounded by :data:`BOUNDS`.

    Known before the chain is built (LangServe reads them when the routes are added); LangServe
    answers 422 to a request outside the bounds, before anything runs.
    """
    record = strategies.get(strategy)
    fields = [(N_FIELD, record.default_n)] if record.counted else []
    fields += [(K_FIELD, None), (TOP_N_FIELD, record.default_top_n)]
    return [
        ConfigurableFieldSpec(
            id=field.id,
            name=field.name,
            description=f"{field.description} (1 to {BOUNDS[field.id]})",
            default=default,
            annotation=_bounded(BOUNDS[field.id]),
        )
        for field, default in fields
    ]


class ServedChain(RunnableSerializable[QuestionInput, Any]):
    """A strategy's chain as served: built by :func:`served_chain` on first use (unless given).

    Calls pass the caller's config through unchanged, so this wrapper adds no run of its own: a
    trace starts with the strategy's run (``rag-fusion``, ``hyde``, ...). Its configurable
    fields are the bounded :func:`per_call_settings`.
    """

    strategy: str
    return_sources: bool = False
    source: IndexSource | None = None
    """Where to search; None: :meth:`IndexSource.from_environment` at the first call."""
    _chain: Runnable[QuestionInput, Any] | None = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def model_post_init(self, context: Any) -> None:
        strategies.get(self.strategy)  # a ValueError naming the strategies for an unknown one

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        return per_call_settings(self.strategy)

    def chain(self) -> Runnable[QuestionInput, Any]:
        """The built chain (opening the index the first time)."""
        with self._lock:
            if self._chain is None:
                self._chain = served_chain(
                    self.strategy, self.source, return_sources=self.return_sources
                )
            return self._chain

    async def _achain(self) -> Runnable[QuestionInput, Any]:
        """:meth:`chain` off the event loop: the first build opens (or builds) the index."""
        return await asyncio.to_thread(self.chain)

    def invoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        return self.chain().invoke(input, without_unset(config), **kwargs)

    async def ainvoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        return await (await self._achain()).ainvoke(input, without_unset(config), **kwargs)

    def stream(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        yield from self.chain().stream(input, without_unset(config), **kwargs)

    async def astream(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        chain = await self._achain()
        async for chunk in chain.astream(input, without_unset(config), **kwargs):
            yield chunk


def without_unset(config: RunnableConfig | None) -> RunnableConfig | None:
    """``config`` without the per-call settings set to None (LangServe fills every unset one in).

    A None ``k`` would otherwise reach retrievers that read ``configurable["k"]`` themselves
    (the hybrid :class:`~rag_fusion_chain.retrievers.fusion_retriever.FusionRetriever`).
    """
    if not config or not config.get("configurable"):
        return config
    configurable = {
        key: value for key, value in config["configurable"].items() if value is not None
    }
    return {**config, "configurable": configurable}


def build_chain(
    strategy: str,
    *,
    return_sources: bool = False,
    source: IndexSource | None = None,
    chain: Runnable[QuestionInput, Any] | None = None,
) -> Runnable[QuestionInput, Any]:
    """The served chain of ``strategy``, typed ``Question -> str``; opens its index on first use.

    With ``return_sources`` the output is ``{"answer", "queries", "documents", "failures"}``.
    ``source`` defaults to :meth:`IndexSource.from_environment`, read at the first call;
    ``chain`` serves a chain built already (``rag-fusion serve`` does) with the same input
    checks and bounded settings.
    The input schema is :class:`Question` or :data:`QuestionText`: as every chain of the kit,
    it takes ``{"question": str}`` or the question itself, over HTTP too.

    >>> [option.get("type") for option in build_chain("hyde").get_input_jsonschema()["anyOf"]]
    [None, 'string']
    """
    # The name titles the schemas (LangServe keys its models by them); runs keep the strategy's.
    name = f"{strategy}-sources" if return_sources else strategy
    served = ServedChain(strategy=strategy, return_sources=return_sources, source=source, name=name)
    served._chain = chain
    output_type: Any = dict if return_sources else str
    # with_types takes the schema model; its stub wants type[Input] (here str | Mapping).
    input_type: Any = Union[Question, QuestionText]  # noqa: UP007 (a runtime type for pydantic)
    return served.with_types(input_type=input_type, output_type=output_type)


def create_app(
    routes: Mapping[str, Runnable[Any, Any]],
    *,
    title: str = "rag-fusion-chain",
    allowed_hosts: Sequence[str] = (),
) -> Any:
    """A FastAPI app serving each runnable of ``routes`` at ``/<path>`` with LangServe.

    A route nested in another (``rag-fusion/sources`` in ``rag-fusion``) is added first, as it
    must be: LangServe's ``/rag-fusion/{config_hash}/invoke`` would otherwise catch it.

    Requests are bounded by :func:`~rag_fusion_chain.serving_limits.limit_requests` (loopback
    Host names plus ``allowed_hosts``, JSON bodies only, body size, depth and batch size); a
    runnable made by :func:`build_chain` also refuses empty or oversized questions and
    out-of-range ``n``, ``k``, ``top_n`` with 422.
    """
    try:
        from fastapi import FastAPI
        from langserve import add_routes
    except ImportError as error:
        raise ImportError(
            f'serving needs {error.name}: pip install "rag-fusion-chain[serve]"'
        ) from error
    from rag_fusion_chain._version import __version__
    from rag_fusion_chain.serving_limits import limit_requests

    app = limit_requests(FastAPI(title=title, version=__version__), allowed_hosts=allowed_hosts)
    # Longer paths first: "/x/{config_hash}/invoke" would also match "/x/sources/invoke".
    for path in sorted(routes, key=lambda path: -len(path.strip("/"))):
        add_routes(app, routes[path], path=f"/{path.strip('/')}")
    return app


__all__ = [
    "CACHE_DIR_ENV",
    "CHROMA_COLLECTION_ENV",
    "CHROMA_URL_ENV",
    "DEFAULT_CACHE_DIR",
    "INDEX_ENV",
    "MAX_K",
    "MAX_TOP_N",
    "BOUNDS",
    "VECTOR_STORES",
    "VECTOR_STORE_ENV",
    "ServedChain",
    "IndexSource",
    "Question",
    "QuestionText",
    "build_chain",
    "clear_cache",
    "create_app",
    "cache_directory",
    "chroma_address",
    "chroma_server_index",
    "index_directory",
    "open_source",
    "per_call_settings",
    "sample_index",
    "served_chain",
    "vector_store_kind",
    "with_shipped_vectors",
]
