"""What ``rag-fusion serve`` and the templates serve: a strategy's chain, opened on first use
over ``RAG_FUSION_INDEX``, else a Chroma server (``RAG_FUSION_CHROMA_URL``), else the sample."""

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
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.utils import ConfigurableFieldSpec
from pydantic import Discriminator, PrivateAttr, Tag
from pydantic_core import core_schema

from rag_fusion_chain import chains, data, ingest, models, strategies, validation
from rag_fusion_chain.chains import K_SPEC, N_SPEC, TOP_N_SPEC
from rag_fusion_chain.data import vectors
from rag_fusion_chain.retrievers import index_directory, stores
from rag_fusion_chain.retrievers.bm25 import BM25Retriever
from rag_fusion_chain.retrievers.index_directory import OpenedIndex, read_settings
from rag_fusion_chain.validation import KIT_CACHE, Question, QuestionInput, require_extra

INDEX_ENV = "RAG_FUSION_INDEX"
CHROMA_URL_ENV = "RAG_FUSION_CHROMA_URL"
CHROMA_COLLECTION_ENV = "RAG_FUSION_CHROMA_COLLECTION"
VECTOR_STORE_ENV = "RAG_FUSION_VECTOR_STORE"
CACHE_DIR_ENV = "RAG_FUSION_CACHE_DIR"
DEFAULT_CACHE_DIR = KIT_CACHE / "indexes"
DEFAULT_COLLECTION = stores.DEFAULT_COLLECTION
CHROMA_PAGE = 1000  # documents read per request to build BM25 over a Chroma collection
MAX_K = 100
MAX_TOP_N = 100

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexSource:
    """Where a served chain searches: an index directory, a Chroma server, or (neither) the sample."""

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
            _chroma_address(self.chroma_url)
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
        """The environment's source; an index or a URL given (``serve``'s flags) replaces it."""
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
        """Where this source is, in words (a URL without its user info)."""
        if self.index is not None:
            return f"index {self.index}"
        if self.chroma_url is not None:
            url = validation.redact_credentials(self.chroma_url)
            return f"Chroma collection {self.chroma_collection!r} at {url}"
        return "the bundled SciFact sample"


def _chroma_address(url: str) -> tuple[str, int, bool]:
    """``(host, port, https)`` of a Chroma server URL such as ``http://127.0.0.1:8000``."""
    parts = urlsplit(url)
    with contextlib.suppress(ValueError):  # a port that is no number
        if parts.scheme in ("http", "https") and parts.hostname:
            https = parts.scheme == "https"
            return parts.hostname, parts.port or (443 if https else 8000), https
    shown = validation.redact_credentials(url)
    raise ValueError(f"{CHROMA_URL_ENV} (--chroma-url) must be http://host:port, got {shown!r}")


def with_shipped_vectors(
    embeddings: Embeddings, documents: Sequence[Document] | None = None
) -> Embeddings | None:
    """``embeddings`` knowing the sample's shipped vectors, or None (logged why) if they do not fit."""
    try:
        shipped = vectors.load_sample_vectors()
    except (OSError, ValueError, KeyError) as error:
        logger.info("the shipped sample vectors are not used: %s", error)
        return None
    if not vectors.vectors_fit(shipped.record, embeddings):
        identity = models.embedding_identity(embeddings)
        logger.info("the shipped sample vectors are not %s's: embedding the sample", identity)
        return None
    documents = documents or ingest.load([data.sample_corpus_path()])
    texts = [document.page_content for document in documents]
    return models.PrecomputedEmbeddings(embeddings, shipped.by_text(texts))


def sample_index(embedding: str, kind: str | None = None) -> OpenedIndex:
    """BM25 and a vector store (``kind``, default ``RAG_FUSION_VECTOR_STORE``, else faiss) over the
    sample: FAISS in memory from the shipped vectors when they fit, else an index built once into
    ``RAG_FUSION_CACHE_DIR``, named by corpus, embeddings and precision."""
    kind = _vector_store(kind)
    corpus = data.sample_corpus_path()
    embeddings = models.embeddings(embedding)
    documents = ingest.load([corpus])
    shipped = with_shipped_vectors(embeddings, documents)
    if kind == "faiss" and shipped is not None:
        settings = {"store": kind, "embedding": embedding, "source": "shipped vectors"}
        return _in_memory(settings, stores.build_faiss(documents, shipped), documents)
    identity = {
        "format": index_directory.INDEX_FORMAT,
        "corpus_sha256": hashlib.sha256(corpus.read_bytes()).hexdigest(),
        "embedding": models.embedding_identity(embeddings),
        "precision": models.embedding_precision(embeddings),
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    cache_dir = Path(os.environ.get(CACHE_DIR_ENV) or DEFAULT_CACHE_DIR).expanduser()
    directory = cache_dir / f"{kind}-{digest[:16]}"
    if not (directory / index_directory.INDEX_FILE).is_file():
        with contextlib.suppress(FileExistsError):  # another process built it meanwhile
            index_directory.build_index(
                [corpus], directory, store=kind, embedding=shipped or embedding, chunk_size=None
            )
    return index_directory.open_index(directory, embeddings)


def _vector_store(kind: str | None = None) -> str:
    """``kind``, else ``RAG_FUSION_VECTOR_STORE``, else faiss: one of :data:`index_directory.STORES`."""
    kind = (kind or os.environ.get(VECTOR_STORE_ENV) or "faiss").strip().lower()
    if kind not in index_directory.STORES:
        raise ValueError(f"{VECTOR_STORE_ENV} must be faiss or chroma; got {kind!r}")
    return kind


def _in_memory(settings: dict[str, Any], store: Any, documents: list[Document]) -> OpenedIndex:
    """An opened index of a vector store, with BM25 built over ``documents``."""
    bm25 = BM25Retriever.from_documents(documents)
    return OpenedIndex(settings, stores.VectorRetriever(vectorstore=store), bm25)


def chroma_server_index(url: str, collection: str, embedding: str | None) -> OpenedIndex:
    """A Chroma server's collection, with BM25 over its documents read in pages; ``embedding``
    must be what built the collection."""
    client = stores.chroma_http_client(*_chroma_address(url))  # its requests bounded
    store = stores.load_chroma(
        models.embeddings(embedding), collection_name=collection, client=client
    )
    documents: list[Document] = []
    while True:
        page = store.get(
            limit=CHROMA_PAGE, offset=len(documents), include=["documents", "metadatas"]
        )
        rows = zip(page["ids"], page["documents"] or [], page["metadatas"] or [], strict=True)
        documents += [
            Document(text or "", metadata=dict(meta or {}), id=id_) for id_, text, meta in rows
        ]
        if len(page["ids"]) < CHROMA_PAGE:
            break
    if not documents:
        shown = validation.redact_credentials(url)
        raise ValueError(f"the Chroma collection {collection!r} at {shown} holds no documents")
    return _in_memory({"store": "chroma", "embedding": embedding, "source": url}, store, documents)


def _check_environment(source: IndexSource) -> None:
    """The settings a served chain reads on first use, checked now as it will read them (the
    index's record, not the index; the embedding model, cached): a ValueError naming the wrong one."""
    embedding, url = os.environ.get(models.EMBEDDING_ENV), source.chroma_url
    sample = source.index is None and url is None
    checks: dict[str, Callable[[], Any]] = {  # each setting as it will be read, if it will be
        INDEX_ENV: lambda: source.index and read_settings(source.index, verified=True),
        CHROMA_URL_ENV: lambda: url and stores.chroma_http_client(*_chroma_address(url)),
        VECTOR_STORE_ENV: lambda: sample and _vector_store(),
        models.EMBEDDING_ENV: lambda: embedding and models.embeddings(embedding),
        models.CHAT_MODEL_ENV: models.chat_model,
    }
    for variable, check in checks.items():
        try:
            check()
        except (ImportError, OSError, ValueError) as error:
            shown = validation.redact_credentials(os.environ.get(variable, ""))
            raise ValueError(f"{variable}={shown} cannot be served: {error}") from error


@functools.lru_cache(maxsize=4)
def open_source(
    source: IndexSource, embedding: str | None = None, *, trust: bool = False
) -> OpenedIndex:
    """The opened index of ``source``, one line logged when ready; ``embedding`` overrides the
    index's own (default ``RAG_FUSION_EMBEDDING``), ``trust`` loads an index not signed here."""
    if not logging.getLogger().handlers and not logger.handlers:  # unless the app set logging
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    started = time.perf_counter()
    embedding = embedding or os.environ.get(models.EMBEDDING_ENV) or None
    if source.index is not None:
        opened = index_directory.open_index(source.index, embedding, trust=trust)
    elif source.chroma_url is not None:
        opened = chroma_server_index(source.chroma_url, source.chroma_collection, embedding)
    else:
        opened = sample_index(embedding or models.DEFAULT_EMBEDDING)
    seconds, store = time.perf_counter() - started, opened.settings.get("store")
    count = len(opened.bm25.documents)
    logger.info(
        f"rag-fusion-chain: {source.describe()} ready ({validation.counted(count, 'document')}, {store}) in {seconds:.1f} s"
    )
    return opened


def _bounded(upper: int) -> Any:
    """An int type from 1 to ``upper``: LangServe's config models keep types, not ``Field`` bounds."""
    schema = core_schema.int_schema(ge=1, le=upper)
    return type(f"CountUpTo{upper}", (), {"__get_pydantic_core_schema__": lambda *_: schema})


class ServedChain(RunnableSerializable[QuestionInput, Any]):
    """A strategy's chain over ``source`` (default: the sample), built on first use; it adds
    no run to a trace (calls pass the caller's config on; LangServe's None is an unset setting)."""

    strategy: str
    return_sources: bool = False
    source: IndexSource = IndexSource()
    _chain: Runnable[QuestionInput, Any] | None = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        """``n`` (where the strategy counts queries), ``k`` and ``top_n``, from 1 to their bounds."""
        record = strategies.get(self.strategy)
        counted = [(N_SPEC, record.default_n, validation.MAX_QUERIES)] if record.default_n else []
        settings = [*counted, (K_SPEC, None, MAX_K), (TOP_N_SPEC, record.default_top_n, MAX_TOP_N)]
        return [
            spec._replace(
                default=default,
                annotation=_bounded(upper),
                description=f"{spec.description} (1 to {upper})",
            )
            for spec, default, upper in settings
        ]

    def chain(self) -> Runnable[QuestionInput, Any]:
        """The built chain (opening the index the first time)."""
        with self._lock:
            if self._chain is None:
                opened = open_source(self.source)  # embeddings: RAG_FUSION_EMBEDDING
                self._chain = chains.chain_for(
                    self.strategy,
                    [opened.bm25, opened.vectors],
                    models.chat_model(),
                    return_sources=self.return_sources,
                )
            return self._chain

    def invoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        return self.chain().invoke(input, config, **kwargs)

    async def ainvoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        chain = await asyncio.to_thread(self.chain)  # the first call opens the index
        return await chain.ainvoke(input, config, **kwargs)

    def stream(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        yield from self.chain().stream(input, config, **kwargs)

    async def astream(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        chain = await asyncio.to_thread(self.chain)
        async for chunk in chain.astream(input, config, **kwargs):
            yield chunk


def build_chain(
    strategy: str,
    *,
    return_sources: bool = False,
    chain: Runnable[QuestionInput, Any] | None = None,
) -> Runnable[QuestionInput, Any]:
    """The served chain of ``strategy``: ``{"question": str}`` or the question in, the answer (or
    ``{"answer", "queries", "documents", "failures"}``) out; ``chain``: one built already, else one
    over the environment's source, checked now (a template's import: the server's start-up)."""
    strategies.get(strategy)  # a ValueError naming the strategies for an unknown one
    source = IndexSource.from_environment() if chain is None else IndexSource()
    if chain is None:  # at start-up, not at a request
        _check_environment(source)
    # The name titles the schemas (LangServe keys its models by them); runs keep the strategy's.
    name = f"{strategy}-sources" if return_sources else strategy
    served = ServedChain(strategy=strategy, return_sources=return_sources, source=source, name=name)
    served._chain = chain
    forms = Annotated[Question, Tag("Question")] | Annotated[validation.QuestionText, Tag("str")]
    by_type = Discriminator(lambda value: "str" if isinstance(value, str) else "Question")
    input_type: Any = Annotated[forms, by_type]  # a failure reports the given form's errors alone
    return served.with_types(input_type=input_type, output_type=dict if return_sources else str)


def create_app(
    routes: Mapping[str, Runnable[Any, Any]], *, allowed_hosts: Sequence[str] = ()
) -> Any:
    """A FastAPI app serving each route at ``/<path>`` with LangServe, within ``limit_requests``."""
    FastAPI = require_extra("fastapi", "serve").FastAPI  # noqa: N806 (the class)
    add_routes = require_extra("langserve", "serve").add_routes
    from rag_fusion_chain._version import __version__
    from rag_fusion_chain.serving_limits import limit_requests

    app = limit_requests(
        FastAPI(title="rag-fusion-chain", version=__version__), allowed_hosts=allowed_hosts
    )
    # Longer paths first: "/x/{config_hash}/invoke" would also match "/x/sources/invoke".
    for path in sorted(routes, key=lambda path: -len(path.strip("/"))):
        add_routes(app, routes[path], path=f"/{path.strip('/')}")
    return app
