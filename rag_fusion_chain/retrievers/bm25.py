"""Keyword retrieval with BM25 (bm25s), plus the batching base class the kit's retrievers share.

* :func:`tokenize` handles English (lower-casing, stopwords, Snowball English stemming via
  PyStemmer) and Chinese/Japanese/Korean (character bigrams for each CJK run, so
  ``光伏发电`` becomes ``光伏 伏发 发电``); mixed text works because each run is handled by its kind.
* :class:`BatchedRetriever` answers ``batch``/``abatch`` with ONE underlying call for all queries
  (one ``bm25s.retrieve``, one embedding request, ...), keeps a callback run per query, and
  honours ``k`` at invoke time: ``retriever.invoke("query", k=3)``.
* :class:`BM25Retriever` puts the BM25 score (higher is better) in ``metadata["score"]`` of
  fresh copies; the stored documents are never mutated.

Identity: a document without ``Document.id`` is given the content hash of
:func:`rag_fusion_chain.fusion.document_id` as its id, the same id the kit's vector stores use, so
that fusion merges the keyword and the vector hit of one chunk.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForRetrieverRun,
    CallbackManager,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list, run_in_executor
from pydantic import Field, field_validator

from rag_fusion_chain.fusion import SCORE_KEY, document_id
from rag_fusion_chain.queries import validate_count
from rag_fusion_chain.retrievers.fanout import DEFAULT_K

BM25_FORMAT = "rag_fusion_chain.bm25"
BM25_FORMAT_VERSION = 1
DOCUMENTS_FILE = "documents.json"
SETTINGS_FILE = "retriever.json"


# --------------------------------------------------------------------------------------------
# Shared helpers: identity, scored copies
# --------------------------------------------------------------------------------------------


def with_identity(document: Document) -> Document:
    """Return ``document`` if it has an id, else a copy whose id is its content hash.

    >>> with_identity(Document("text", id="doc-1")).id
    'doc-1'
    >>> len(with_identity(Document("text")).id)
    32
    """
    if document.id:
        return document
    return document.model_copy(update={"id": document_id(document)})


def scored_copy(document: Document, score: float) -> Document:
    """A copy of ``document`` with ``metadata["score"] = score`` and an id (never mutates).

    >>> scored_copy(Document("text", id="a"), 0.5).metadata
    {'score': 0.5}
    """
    identified = with_identity(document)
    return identified.model_copy(
        update={"metadata": {**identified.metadata, SCORE_KEY: float(score)}}
    )


# --------------------------------------------------------------------------------------------
# Batched retriever base
# --------------------------------------------------------------------------------------------


class BatchedRetriever(BaseRetriever):
    """A retriever that answers N queries with one underlying call.

    Subclasses implement :meth:`_retrieve_many` (and :meth:`_aretrieve_many` when they have a
    native async path). ``invoke`` is a batch of one; ``batch``/``abatch`` (hence
    ``retriever.map()`` and fan-out code calling ``.batch(queries, config)``) make one call for
    all queries while still reporting one retriever run per query to callbacks and tracing.
    """

    k: int = DEFAULT_K
    """Documents returned per query; override per call with ``invoke(query, k=...)``."""

    @field_validator("k")
    @classmethod
    def _check_k(cls, k: int) -> int:
        return validate_count("k", k)

    def _retrieve_many(
        self,
        queries: list[str],
        k: int,
        run_managers: Sequence[CallbackManagerForRetrieverRun],
    ) -> list[list[Document]]:
        """Return one ranked list per query; the single place subclasses do their work."""
        raise NotImplementedError

    async def _aretrieve_many(
        self,
        queries: list[str],
        k: int,
        run_managers: Sequence[AsyncCallbackManagerForRetrieverRun],
    ) -> list[list[Document]]:
        """Async variant; by default runs :meth:`_retrieve_many` in an executor thread."""
        sync_managers = [manager.get_sync() for manager in run_managers]
        return await run_in_executor(None, self._retrieve_many, queries, k, sync_managers)

    def _resolve_k(self, k: int | None) -> int:
        return self.k if k is None else validate_count("k", k)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return self._retrieve_many([query], self._resolve_k(k), [run_manager])[0]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        return (await self._aretrieve_many([query], self._resolve_k(k), [run_manager]))[0]

    def _batch_k(self, kwargs: dict[str, Any]) -> int:
        k = kwargs.pop("k", None)
        if kwargs:
            raise TypeError(f"unexpected keyword arguments for batch: {sorted(kwargs)}")
        return self._resolve_k(k)

    def _configure(
        self, config: RunnableConfig, manager_class: type[CallbackManager | AsyncCallbackManager]
    ) -> Any:
        """Configure a callback manager exactly as ``BaseRetriever.invoke`` does."""
        return manager_class.configure(
            config.get("callbacks"),
            None,
            inheritable_tags=config.get("tags"),
            local_tags=self.tags,
            inheritable_metadata={**(config.get("metadata") or {}), **self._get_ls_params()},
            local_metadata=self.metadata,
        )

    def batch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Retrieve for every query with one underlying call; one callback run per query.

        >>> # retriever.batch(["solar power", "wind power"], k=3)  -> [[...3 docs], [...3 docs]]
        """
        if not inputs:
            return []
        queries = list(inputs)
        k = self._batch_k(dict(kwargs))
        configs = get_config_list(config, len(queries))
        run_managers = [
            self._configure(query_config, CallbackManager).on_retriever_start(
                None,
                query,
                name=query_config.get("run_name") or self.get_name(),
                run_id=query_config.pop("run_id", None),
            )
            for query, query_config in zip(queries, configs, strict=True)
        ]
        try:
            results = self._retrieve_many(queries, k, run_managers)
        except Exception as error:
            for run_manager in run_managers:
                run_manager.on_retriever_error(error)
            if return_exceptions:
                return [error] * len(queries)
            raise
        for run_manager, documents in zip(run_managers, results, strict=True):
            run_manager.on_retriever_end(documents)
        return results

    async def abatch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Async :meth:`batch`: one underlying call for all queries."""
        if not inputs:
            return []
        queries = list(inputs)
        k = self._batch_k(dict(kwargs))
        configs = get_config_list(config, len(queries))
        run_managers = [
            await self._configure(query_config, AsyncCallbackManager).on_retriever_start(
                None,
                query,
                name=query_config.get("run_name") or self.get_name(),
                run_id=query_config.pop("run_id", None),
            )
            for query, query_config in zip(queries, configs, strict=True)
        ]
        try:
            results = await self._aretrieve_many(queries, k, run_managers)
        except Exception as error:
            for run_manager in run_managers:
                await run_manager.on_retriever_error(error)
            if return_exceptions:
                return [error] * len(queries)
            raise
        for run_manager, documents in zip(run_managers, results, strict=True):
            await run_manager.on_retriever_end(documents)
        return results


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------

_CJK_RANGES = (
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3400-\u4dbf"  # CJK Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\U00020000-\U0002ebef"  # CJK Extensions B-F
)
_TOKEN_PATTERN = re.compile(f"(?P<cjk>[{_CJK_RANGES}]+)|(?P<word>[^\\W_{_CJK_RANGES}]+)")
_thread_state = threading.local()


def _english_stemmer() -> Any:
    """One PyStemmer Snowball stemmer per thread (stemmer objects are not thread-safe)."""
    stemmer = getattr(_thread_state, "stemmer", None)
    if stemmer is None:
        try:
            import Stemmer
        except ImportError as error:
            raise ImportError(
                'BM25 stemming needs PyStemmer: pip install "rag-fusion-chain[bm25]"'
            ) from error
        stemmer = _thread_state.stemmer = Stemmer.Stemmer("english")
    return stemmer


@functools.cache
def _english_stopwords() -> frozenset[str]:
    try:
        from bm25s.stopwords import STOPWORDS_EN_PLUS
    except ImportError as error:
        raise ImportError(
            'BM25 retrieval needs bm25s: pip install "rag-fusion-chain[bm25]"'
        ) from error
    return frozenset(STOPWORDS_EN_PLUS)


def cjk_bigrams(run: str) -> list[str]:
    """Overlapping character bigrams of a CJK run; a single character stays a unigram.

    >>> cjk_bigrams("光伏发电")
    ['光伏', '伏发', '发电']
    >>> cjk_bigrams("电")
    ['电']
    """
    if len(run) == 1:
        return [run]
    return [run[index : index + 2] for index in range(len(run) - 1)]


def tokenize(text: str, *, stem: bool = True, remove_stopwords: bool = True) -> list[str]:
    """Split text into BM25 terms: English words and CJK character bigrams, in text order.

    Text is NFKC-normalised (full-width forms become ASCII) and case-folded. English words are
    filtered against bm25s's English stopword list (179 words, NLTK's) and Snowball-stemmed;
    digits are kept; each CJK run becomes its overlapping bigrams.

    >>> tokenize("The panels are running; 光伏发电 works")
    ['panel', 'run', '光伏', '伏发', '发电', 'work']
    """
    normalized = unicodedata.normalize("NFKC", text).casefold()
    stopwords = _english_stopwords() if remove_stopwords else frozenset()
    tokens: list[str] = []
    words: list[str] = []
    for match in _TOKEN_PATTERN.finditer(normalized):
        if match.lastgroup == "cjk":
            tokens.extend(_stem_words(words, stem))
            words = []
            tokens.extend(cjk_bigrams(match.group()))
        elif match.group() not in stopwords:
            words.append(match.group())
    tokens.extend(_stem_words(words, stem))
    return tokens


def _stem_words(words: list[str], stem: bool) -> list[str]:
    if not stem or not words:
        return words
    return list(_english_stemmer().stemWords(words))


# --------------------------------------------------------------------------------------------
# BM25 retriever
# --------------------------------------------------------------------------------------------


def _bm25s_module() -> Any:
    try:
        import bm25s
    except ImportError as error:
        raise ImportError(
            'BM25Retriever needs bm25s: pip install "rag-fusion-chain[bm25]"'
        ) from error
    return bm25s


class BM25Retriever(BatchedRetriever):
    """BM25 keyword retriever over a fixed set of Documents, built on bm25s.

    Scores (higher is better, 0 = no query term matched) go to ``metadata["score"]`` of copies;
    documents that match no query term are not returned, so a list may be shorter than ``k``.
    Many queries are scored in one ``bm25s.BM25.retrieve`` call by ``batch``/``abatch``.

    >>> retriever = BM25Retriever.from_documents(
    ...     [Document("solar panels", id="1"), Document("wind turbines", id="2")], k=1
    ... )
    >>> [document.id for document in retriever.invoke("solar panel")]
    ['1']
    """

    documents: list[Document]
    """The indexed documents, each with an id (a content hash where none was given)."""
    index: Any = Field(repr=False, exclude=True)
    """The ``bm25s.BM25`` index, aligned with ``documents``."""
    stem: bool = True
    """Snowball-stem English words (index and queries must agree; saved with the index)."""
    remove_stopwords: bool = True
    """Drop English stopwords (saved with the index)."""

    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document],
        *,
        k: int = DEFAULT_K,
        stem: bool = True,
        remove_stopwords: bool = True,
        k1: float = 1.5,
        b: float = 0.75,
        method: str = "lucene",
        **kwargs: Any,
    ) -> BM25Retriever:
        """Index ``documents`` (not mutated) with bm25s.

        ``k1``, ``b`` and ``method`` are bm25s's BM25 parameters; ``kwargs`` go to the
        retriever (``tags``, ``metadata``).

        >>> BM25Retriever.from_documents([Document("a solar panel")], k=2).k
        2
        """
        if not documents:
            raise ValueError("documents: cannot build a BM25 index from no documents")
        identified = [with_identity(document) for document in documents]
        index = _bm25s_module().BM25(k1=k1, b=b, method=method)
        corpus_tokens = [
            tokenize(document.page_content, stem=stem, remove_stopwords=remove_stopwords)
            for document in identified
        ]
        index.index(corpus_tokens, show_progress=False)
        return cls(
            documents=identified,
            index=index,
            k=k,
            stem=stem,
            remove_stopwords=remove_stopwords,
            **kwargs,
        )

    def _query_token_ids(self, query: str) -> list[int]:
        vocabulary: dict[str, int] = self.index.vocab_dict
        tokens = tokenize(query, stem=self.stem, remove_stopwords=self.remove_stopwords)
        return [vocabulary[token] for token in tokens if token in vocabulary]

    def _retrieve_many(
        self,
        queries: list[str],
        k: int,
        run_managers: Sequence[CallbackManagerForRetrieverRun],
    ) -> list[list[Document]]:
        token_ids = [self._query_token_ids(query) for query in queries]
        answerable = [position for position, ids in enumerate(token_ids) if ids]
        results: list[list[Document]] = [[] for _ in queries]
        if not answerable:
            return results
        indices, scores = self.index.retrieve(
            [token_ids[position] for position in answerable],
            k=min(k, len(self.documents)),
            show_progress=False,
        )
        for row, position in enumerate(answerable):
            results[position] = [
                scored_copy(self.documents[int(index)], float(score))
                for index, score in zip(indices[row], scores[row], strict=True)
                if score > 0
            ]
        return results

    def save(self, directory: str | Path) -> Path:
        """Write the index (bm25s JSON/npy, no pickle), the documents and settings as JSON.

        >>> # retriever.save("indexes/bm25"); BM25Retriever.load("indexes/bm25")
        """
        path = Path(directory)
        documents = [
            _document_to_json(position, document)
            for position, document in enumerate(self.documents)
        ]
        path.mkdir(parents=True, exist_ok=True)
        self.index.save(str(path), show_progress=False)
        settings = {
            "format": BM25_FORMAT,
            "format_version": BM25_FORMAT_VERSION,
            "k": self.k,
            "stem": self.stem,
            "remove_stopwords": self.remove_stopwords,
        }
        (path / DOCUMENTS_FILE).write_text(json.dumps(documents, ensure_ascii=False), "utf-8")
        (path / SETTINGS_FILE).write_text(json.dumps(settings, indent=2), "utf-8")
        return path

    @classmethod
    def load(cls, directory: str | Path, **kwargs: Any) -> BM25Retriever:
        """Load a retriever written by :meth:`save`; ``kwargs`` override fields (e.g. ``k``).

        No pickle is involved: bm25s arrays load with ``allow_pickle=False``, the rest is JSON.

        >>> # BM25Retriever.load("indexes/bm25", k=10)
        """
        path = Path(directory)
        if not path.is_dir():
            raise FileNotFoundError(f"BM25 index directory not found: {path}")
        settings = _read_json(path / SETTINGS_FILE)
        if not isinstance(settings, dict) or settings.get("format") != BM25_FORMAT:
            raise ValueError(f"{path / SETTINGS_FILE} is not a BM25Retriever settings file")
        entries = _read_json(path / DOCUMENTS_FILE)
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            raise ValueError(f"{path / DOCUMENTS_FILE} is not a list of documents (corrupt?)")
        documents = [Document(**entry) for entry in entries]
        try:
            index = _bm25s_module().BM25.load(str(path), load_corpus=False, show_progress=False)
        except FileNotFoundError:
            raise
        except (ValueError, EOFError, KeyError, OSError) as error:  # truncated or foreign files
            raise ValueError(
                f"{path}: the bm25s index files are corrupt or incomplete "
                f"({type(error).__name__}: {error}); rebuild the index"
            ) from error
        if index.scores["num_docs"] != len(documents):
            raise ValueError(
                f"{path}: the BM25 index holds {index.scores['num_docs']} documents but "
                f"{DOCUMENTS_FILE} holds {len(documents)}; the directory is inconsistent"
            )
        fields = {
            "k": settings["k"],
            "stem": settings["stem"],
            "remove_stopwords": settings["remove_stopwords"],
            **kwargs,
        }
        return cls(documents=documents, index=index, **fields)


def _document_to_json(position: int, document: Document) -> dict[str, Any]:
    entry = {
        "id": document.id,
        "page_content": document.page_content,
        "metadata": document.metadata,
    }
    try:
        json.dumps(entry, ensure_ascii=False)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"document {position} (id={document.id!r}) has metadata that is not "
            f"JSON-serialisable, so it cannot be saved: {error}"
        ) from error
    return entry


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"missing file: {path}")
    try:
        return json.loads(path.read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON (corrupt?): {error}") from error


__all__ = [
    "BM25Retriever",
    "BatchedRetriever",
    "cjk_bigrams",
    "scored_copy",
    "tokenize",
    "with_identity",
]
