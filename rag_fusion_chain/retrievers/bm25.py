"""Keyword retrieval with BM25 (bm25s), on the batching base class of :mod:`.base`.

* :func:`tokenize` handles English (lower-casing, stopwords, Snowball English stemming via
  PyStemmer) and Chinese/Japanese/Korean (character bigrams for each CJK run, so
  ``光伏发电`` becomes ``光伏 伏发 发电``); mixed text works because each run is handled by its kind.
* :class:`BM25Retriever` (a :class:`~.base.BatchedRetriever`: one ``bm25s.retrieve`` for a whole
  batch, ``k`` at invoke time) puts the BM25 score (higher is better) in ``metadata["score"]`` of
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

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from pydantic import Field

from rag_fusion_chain.retrievers.base import BatchedRetriever, scored_copy, with_identity
from rag_fusion_chain.retrievers.fanout import DEFAULT_K

BM25_FORMAT = "rag_fusion_chain.bm25"
BM25_FORMAT_VERSION = 1
DOCUMENTS_FILE = "documents.json"
SETTINGS_FILE = "retriever.json"


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
        documents = _documents_json(self.documents)
        path.mkdir(parents=True, exist_ok=True)
        self.index.save(str(path), show_progress=False)
        settings = {
            "format": BM25_FORMAT,
            "format_version": BM25_FORMAT_VERSION,
            "k": self.k,
            "stem": self.stem,
            "remove_stopwords": self.remove_stopwords,
        }
        (path / DOCUMENTS_FILE).write_text(documents, "utf-8")
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


def _documents_json(documents: Sequence[Document]) -> str:
    """``documents`` as one JSON list, serialised once; TypeError naming the first document
    whose metadata JSON cannot hold (searched only when serialising fails)."""
    entries = [
        {"id": document.id, "page_content": document.page_content, "metadata": document.metadata}
        for document in documents
    ]
    try:
        return json.dumps(entries, ensure_ascii=False)
    except (TypeError, ValueError) as error:
        position = next(
            position for position, entry in enumerate(entries) if not _serialisable(entry)
        )
        raise TypeError(
            f"document {position} (id={entries[position]['id']!r}) has metadata that is not "
            f"JSON-serialisable, so it cannot be saved: {error}"
        ) from error


def _serialisable(entry: dict[str, Any]) -> bool:
    try:
        json.dumps(entry, ensure_ascii=False)
    except (TypeError, ValueError):
        return False
    return True


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"missing file: {path}")
    try:
        return json.loads(path.read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON (corrupt?): {error}") from error


__all__ = [
    "BM25Retriever",
    "cjk_bigrams",
    "tokenize",
]
