"""The kit's strategies over the sample corpus, ready to serve: what the LangChain templates export.

Each template under ``templates/`` exports ``chain = build_chain("<strategy>")``: a chain typed
with :class:`Question` (``{"question": str}`` in, the answer ``str`` out, streamed) that answers
from the SciFact sample shipped in :mod:`rag_fusion_chain.data`, searching it with BM25 and a
vector store at once. Importing is cheap: on first use the corpus is indexed into a cache
directory (reused by later processes) and the chat model is resolved.

Settings, read from the environment on first use:

* ``RAG_FUSION_VECTOR_STORE``: ``faiss`` (default) or ``chroma`` (embedded, persisted in the cache);
* ``RAG_FUSION_CACHE_DIR``: where indexes live (default ``~/.cache/rag-fusion-chain/indexes``);
* ``RAG_FUSION_EMBEDDING`` (default MiniLM, offline), ``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` and
  ``RAG_FUSION_CHAT_MODEL``: see :mod:`rag_fusion_chain.models`. With no chat model configured the
  chain runs offline (feedback queries, extractive answer; see :mod:`rag_fusion_chain.chains`).

>>> from rag_fusion_chain.serving import build_chain
>>> chain = build_chain("rag-fusion")  # nothing indexed yet
>>> # chain.invoke({"question": "Is birth weight associated with breast cancer?"})
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.utils import ConfigurableFieldSpec
from pydantic import BaseModel, Field, PrivateAttr

from rag_fusion_chain import chains, data, models, strategies
from rag_fusion_chain.pipeline import K_FIELD, N_FIELD, TOP_N_FIELD
from rag_fusion_chain.validation import QuestionInput

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever

VECTOR_STORE_ENV = "RAG_FUSION_VECTOR_STORE"
CACHE_DIR_ENV = "RAG_FUSION_CACHE_DIR"
FAISS = "faiss"
CHROMA = "chroma"
VECTOR_STORES = (FAISS, CHROMA)
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "rag-fusion-chain" / "indexes"
"""Outside any repository, like the evaluation's embedding cache."""


class Question(BaseModel):
    """The input of a served chain."""

    question: str = Field(description="The question to answer from the indexed documents")


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


def embedding_name() -> str:
    """The embeddings :func:`models.embeddings` resolves to with no argument."""
    return os.environ.get(models.EMBEDDING_ENV) or models.DEFAULT_EMBEDDING


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


@functools.lru_cache(maxsize=4)
def sample_retrievers(
    kind: str, cache_dir: Path, embedding: str
) -> tuple[BaseRetriever, BaseRetriever]:
    """BM25 and vector retrievers over the sample corpus (one pair per process and settings).

    The index directory (:mod:`rag_fusion_chain.retrievers.index_directory`, vector store of
    ``kind``) is opened from ``cache_dir``, or built there first with the embeddings named
    ``embedding``, one document per abstract. Builds are atomic: a concurrent or interrupted
    build never leaves a half-written index, and when another process wins the race its index
    is used.
    """
    from rag_fusion_chain.retrievers.index_directory import INDEX_FILE, build_index, open_index

    corpus = data.sample_corpus_path()
    embeddings = models.embeddings(embedding)
    directory = index_directory(kind, corpus, embeddings, cache_dir)
    if not (directory / INDEX_FILE).is_file():
        with contextlib.suppress(FileExistsError):  # another process built it meanwhile
            build_index([corpus], directory, store=kind, embedding=embedding, chunk_size=None)
    opened = open_index(directory, embeddings)
    return opened.bm25, opened.vectors


def served_chain(strategy: str) -> Runnable[QuestionInput, str]:
    """The strategy's chain over the sample corpus with the configured models, built now."""
    retrievers = sample_retrievers(vector_store_kind(), cache_directory(), embedding_name())
    return chains.chain_for(strategy, list(retrievers), models.chat_model())


# --------------------------------------------------------------------------------------------
# The exported chain
# --------------------------------------------------------------------------------------------


class DeferredChain(RunnableSerializable[QuestionInput, str]):
    """Builds :func:`served_chain` on first use, then hands every call to it.

    Calls pass the caller's config through unchanged, so this wrapper adds no run of its own: a
    trace starts with the strategy's run (``rag-fusion``, ``hyde``, ...).
    """

    strategy: str
    _chain: Runnable[QuestionInput, str] | None = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def model_post_init(self, context: Any) -> None:
        strategies.get(self.strategy)  # a ValueError naming the strategies for an unknown one

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        """The served chain's per-call settings, known before it is built (LangServe reads them
        when the routes are added): ``n`` where the strategy counts queries, ``k``, ``top_n``."""
        record = strategies.get(self.strategy)
        fields = [(N_FIELD, record.default_n)] if record.counted else []
        fields += [(K_FIELD, None), (TOP_N_FIELD, record.default_top_n)]
        return [
            ConfigurableFieldSpec(
                id=field.id,
                name=field.name,
                description=field.description,
                default=default,
                annotation=int | None,
            )
            for field, default in fields
        ]

    def chain(self) -> Runnable[QuestionInput, str]:
        """The built chain (indexing the corpus the first time)."""
        with self._lock:
            if self._chain is None:
                self._chain = served_chain(self.strategy)
            return self._chain

    async def _achain(self) -> Runnable[QuestionInput, str]:
        """:meth:`chain` off the event loop: the first build embeds the whole corpus."""
        return await asyncio.to_thread(self.chain)

    def invoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> str:
        return self.chain().invoke(input, config, **kwargs)

    async def ainvoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> str:
        return await (await self._achain()).ainvoke(input, config, **kwargs)

    def stream(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[str]:
        yield from self.chain().stream(input, config, **kwargs)

    async def astream(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[str]:
        async for chunk in (await self._achain()).astream(input, config, **kwargs):
            yield chunk


def build_chain(strategy: str) -> Runnable[QuestionInput, str]:
    """The served chain of ``strategy``, typed ``Question -> str``; indexes on first use.

    :class:`Question` is its input schema; it is invoked, as every chain of the kit, with
    ``{"question": str}`` or the question itself.

    >>> build_chain("hyde").get_input_jsonschema()["required"]
    ['question']
    """
    deferred = DeferredChain(strategy=strategy, name=strategy)
    # with_types takes the schema model; its stub wants type[Input] (here str | Mapping).
    return deferred.with_types(input_type=Question, output_type=str)  # type: ignore[arg-type]


__all__ = [
    "CACHE_DIR_ENV",
    "DEFAULT_CACHE_DIR",
    "VECTOR_STORES",
    "VECTOR_STORE_ENV",
    "DeferredChain",
    "Question",
    "build_chain",
    "cache_directory",
    "embedding_name",
    "index_directory",
    "sample_retrievers",
    "served_chain",
    "vector_store_kind",
]
