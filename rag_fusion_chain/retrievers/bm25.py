"""Keyword retrieval with BM25 (bm25s): :func:`tokenize` and :class:`BM25Retriever`.

English words are case-folded, stopword-filtered and Snowball-stemmed; each run of Chinese,
Japanese or Korean becomes its character bigrams (``光伏发电`` -> ``光伏 伏发 发电``). Documents
without ``Document.id`` get the content hash the vector stores use, so fusion merges both hits.
"""

from __future__ import annotations

import array
import functools
import itertools
import json
import os
import re
import threading
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_core.documents import Document
from pydantic import Field, field_validator, model_validator

from rag_fusion_chain.retrievers import signing
from rag_fusion_chain.retrievers.base import BatchedRetriever, scored_copy, with_identity
from rag_fusion_chain.retrievers.columns import (
    StoredDocuments,
    columns_json,
    document_columns,
    read_columns,
    stored_documents,
)
from rag_fusion_chain.retrievers.fanout import DEFAULT_K
from rag_fusion_chain.retrievers.signing import has_digest, open_regular_file, write_new_file
from rag_fusion_chain.validation import require_extra

BM25_FORMAT = "rag_fusion_chain.bm25"
BM25_FORMAT_VERSION = 3  # 3: with the term counts
DOCUMENTS_FILE = "documents.json"
COUNTS_FILE = "counts.csc.index.npy"  # each bm25s score entry's term count, for updates
SETTINGS_FILE = "retriever.json"
_BM25S_PARAMETERS = ("k1", "b", "delta", "method", "idf_method", "dtype", "int_dtype")
_CJK_RANGES = (
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3400-\u4dbf"  # CJK Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\U00020000-\U0002ebef"  # CJK Extensions B-F
)
_TOKEN_PATTERN = re.compile(f"([{_CJK_RANGES}]+)|[^\\W_{_CJK_RANGES}]+")
_WORD_PATTERN = re.compile(f"[^\\W_{_CJK_RANGES}]+")
_CJK_PATTERN = re.compile(f"[{_CJK_RANGES}]")
_thread_state = threading.local()
_stems: dict[str, str] = {}  # each word is stemmed once (cleared at a million words)


def _stem(word: str) -> str:
    """``word``'s Snowball English stem, by this thread's PyStemmer stemmer (not thread-safe)."""
    stemmer = getattr(_thread_state, "stemmer", None)
    if stemmer is None:
        stemmer = _thread_state.stemmer = require_extra("Stemmer", "bm25").Stemmer("english")
    if len(_stems) >= 1 << 20:
        _stems.clear()
    return _stems.setdefault(word, str(stemmer.stemWord(word)))


@functools.cache
def _english_stopwords() -> frozenset[str]:
    return frozenset(require_extra("bm25s", "bm25").stopwords.STOPWORDS_EN_PLUS)


def cjk_bigrams(run: str) -> list[str]:
    """Overlapping character bigrams of a CJK run; a single character stays a unigram.

    >>> cjk_bigrams("光伏发电")
    ['光伏', '伏发', '发电']
    """
    return [run] if len(run) == 1 else [run[index : index + 2] for index in range(len(run) - 1)]


def tokenize(text: str, *, stem: bool = True, remove_stopwords: bool = True) -> list[str]:
    """BM25 terms of ``text`` in text order: NFKC-normalised, case-folded English words without
    bm25s's English stopwords, Snowball-stemmed, and CJK character bigrams.

    >>> tokenize("The panels are running; 光伏发电 works")
    ['panel', 'run', '光伏', '伏发', '发电', 'work']
    """
    normalized = unicodedata.normalize("NFKC", text).casefold()
    stopwords = _english_stopwords() if remove_stopwords else frozenset()
    if _CJK_PATTERN.search(normalized) is None:
        words = [word for word in _WORD_PATTERN.findall(normalized) if word not in stopwords]
    else:
        words = []
        for match in _TOKEN_PATTERN.finditer(normalized):
            if match.group(1):
                words.extend(cjk_bigrams(match.group(1)))
            elif match.group() not in stopwords:
                words.append(match.group())
    if not stem:
        return words
    stems = _stems
    return [
        stems.get(word) or (word if _CJK_PATTERN.match(word) else _stem(word)) for word in words
    ]


class BM25Retriever(BatchedRetriever):
    """BM25 keyword retriever over a fixed set of Documents, built on bm25s.

    Scores (higher is better) go to ``metadata["score"]`` of copies; documents matching no query
    term are left out, so a list may be shorter than ``k``. ``batch`` answers all queries in one
    call (numba's backend scores them in one ``bm25s.BM25.retrieve``).

    >>> retriever = BM25Retriever.from_documents([Document("solar panels", id="1")], k=1)
    >>> [document.id for document in retriever.invoke("solar panel")]
    ['1']
    """

    documents: Sequence[Document]
    """The indexed documents, each with an id (a content hash where none was given)."""
    index: Any = Field(repr=False, exclude=True)
    """The ``bm25s.BM25`` index, aligned with ``documents``."""
    counts: Any = Field(default=None, repr=False, exclude=True)
    """The term count of each entry of the index's scores (None if saved before format 3)."""
    stem: bool = True
    """Snowball-stem English words (index and queries must agree; saved with the index)."""
    remove_stopwords: bool = True
    backend: Literal["numpy", "numba"] = "numpy"
    """bm25s's scoring: ``"numba"`` (numba installed) is faster at scale, after a compile (README)."""

    @model_validator(mode="after")
    def _use_backend(self) -> BM25Retriever:
        self.index.backend = self.backend
        return self

    @field_validator("documents", mode="plain")
    @classmethod
    def _documents(cls, documents: Any) -> Sequence[Document]:
        """Loaded columns as they are (Documents made on read), else a list of Documents."""
        if isinstance(documents, StoredDocuments):
            return documents
        listed = list(documents)
        if not all(isinstance(document, Document) for document in listed):
            raise TypeError("documents: expected Documents")
        return listed

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
        """Index ``documents`` (not mutated); ``k1``, ``b``, ``method`` are bm25s's parameters,
        ``kwargs`` go to the retriever (``tags``, ``metadata``)."""
        index = require_extra("bm25s", "bm25").BM25(k1=k1, b=b, method=method)
        settings = {"k": k, "stem": stem, "remove_stopwords": remove_stopwords, **kwargs}
        return cls(documents=[], index=index, **settings).updated(documents)

    @classmethod
    def from_texts(
        cls,
        texts: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        ids: Sequence[str | None] | None = None,
        **kwargs: Any,
    ) -> BM25Retriever:
        """:meth:`from_documents` over ``texts``, each with its metadata and id if given, as
        LangChain's ``BM25Retriever.from_texts``; ``kwargs`` as for ``from_documents``."""
        if isinstance(texts, str):
            raise TypeError("texts must be a list of str, not one str")
        metadatas = [{}] * len(texts) if metadatas is None else metadatas  # copied by Document
        ids = [None] * len(texts) if ids is None else ids
        if not len(texts) == len(metadatas) == len(ids):
            given = f"{len(metadatas)} metadatas and {len(ids)} ids for {len(texts)} texts"
            raise ValueError(f"metadatas and ids: one per text if given; got {given}")
        columns = zip(texts, metadatas, ids, strict=True)
        return cls.from_documents([Document(t, metadata=m, id=i) for t, m, i in columns], **kwargs)

    def updated(self, documents: Sequence[Document | int]) -> BM25Retriever:
        """A retriever with these settings over ``documents``, an int standing for this one's
        document at that position: its counted terms are reused, only new Documents tokenised.

        >>> one = BM25Retriever.from_documents([Document("solar", id="1"), Document("wind", id="2")])
        >>> [document.id for document in one.updated([1, Document("tide", id="3")]).documents]
        ['2', '3']
        """
        import numpy as np

        if self.counts is None and self.documents:  # saved without counts: all are tokenised
            whole = [self.documents[item] if isinstance(item, int) else item for item in documents]
            return self.model_copy(update={"documents": []}).updated(whole)
        if not documents:
            raise ValueError("documents: cannot build a BM25 index from no documents")
        if len(documents) >= 2**31:  # a posting packs its document into 32 bits, its term above
            raise ValueError(f"documents: at most {2**31 - 1} per index, got {len(documents)}")
        olds = [item for item in documents if isinstance(item, int)]
        if len(set(olds)) < len(olds) or not set(olds) <= set(range(len(self.documents))):
            raise ValueError("documents: an int must be a position in this retriever, once")
        fresh = [with_identity(item) for item in documents if not isinstance(item, int)]
        numbers = itertools.count(len(self.documents))  # the fresh ones, after the old ones
        order = [item if isinstance(item, int) else next(numbers) for item in documents]
        pairs = zip(document_columns(self.documents), document_columns(fresh), strict=True)
        columns = [list(map([*old, *new].__getitem__, order)) for old, new in pairs]
        placed = np.array(order, np.int64)
        kept = placed < len(self.documents)
        moved = np.full(len(self.documents), -1)
        moved[placed[kept]] = np.flatnonzero(kept)
        vocab = dict(self.index.vocab_dict) if self.documents else {}
        tokens = array.array("q")  # term id << 32 | document: 8 bytes, not a Python int's 36
        fresh_at = np.flatnonzero(~kept).tolist()
        for at, terms in zip(fresh_at, map(self._terms, document_columns(fresh)[1]), strict=True):
            tokens.extend([vocab.setdefault(term, len(vocab)) << 32 | at for term in terms])
        occurrences = np.frombuffer(tokens, np.int64)
        if self.documents:  # the kept documents' postings, each repeated by its term count
            indptr = self.index.scores["indptr"]
            term_of = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
            owners = moved[self.index.scores["indices"]]
            reused = (term_of << 32 | owners)[owners >= 0], self.counts[owners >= 0]
            occurrences = np.concatenate([np.repeat(*reused), occurrences])
        occurrences.sort()  # by term, then document: bm25s's CSC order
        lengths = np.bincount(occurrences & 0xFFFFFFFF, minlength=len(documents))
        starts = np.flatnonzero(np.diff(occurrences, prepend=-1))  # where each posting begins
        counts = np.diff(starts, append=len(occurrences)).astype(np.int32)
        keys = occurrences[starts]  # each posting once: term id << 32 | document
        del tokens, occurrences, starts  # the build's largest arrays, freed before scoring
        index = _scored_index(self.index, keys, counts, lengths, vocab)
        fields = {"documents": StoredDocuments(*columns), "index": index, "counts": counts}
        return type(self)(**dict(self) | fields)

    def _terms(self, text: str) -> list[str]:
        return tokenize(text, stem=self.stem, remove_stopwords=self.remove_stopwords)

    def _retrieve_many(self, queries: list[str], k: int, run_managers: Any) -> list[list[Document]]:
        vocabulary: dict[str, int] = self.index.vocab_dict
        token_ids = [
            [vocabulary[term] for term in self._terms(query) if term in vocabulary]
            for query in queries
        ]
        answerable = [position for position, ids in enumerate(token_ids) if ids]
        results: list[list[Document]] = [[] for _ in queries]
        if not answerable:
            return results
        asked = [token_ids[position] for position in answerable]
        k = min(k, len(self.documents))
        if self.backend == "numba":
            indices, scores = self.index.retrieve(asked, k=k, show_progress=False)
        else:
            indices, scores = zip(*(self._top_scored(ids, k) for ids in asked), strict=True)
        for row, position in enumerate(answerable):
            results[position] = [
                scored_copy(self.documents[int(index)], float(score))
                for index, score in zip(indices[row], scores[row], strict=True)
                if score > 0
            ]
        return results

    def _top_scored(self, token_ids: list[int], k: int) -> tuple[Any, Any]:
        """The ``k`` best positive scores, best first, and their documents: bm25s's top-k over the
        scored documents only (``retrieve``'s over all, mostly tied zeros, took 28-48 ms at 1M)."""
        import numpy as np
        from bm25s.selection import topk

        scores = self.index.get_scores_from_ids(token_ids)
        scored = np.flatnonzero(scores > 0)
        best, positions = topk(scores[scored], min(k, len(scored)), backend="numpy", sorted=True)
        return scored[positions], best

    def save(self, directory: str | Path) -> Path:
        """Write the bm25s index (JSON/npy), the documents (:mod:`.columns`) and settings; no pickle."""
        path = Path(directory).absolute()
        documents = columns_json(self.documents, path / DOCUMENTS_FILE)
        path.mkdir(parents=True, exist_ok=True)
        self.index.save(str(path), show_progress=False)
        import numpy

        if self.counts is None:  # loaded from an index saved before format 3
            (path / COUNTS_FILE).unlink(missing_ok=True)
        else:
            numpy.save(path / COUNTS_FILE, self.counts.astype("int32"), allow_pickle=False)
        settings = {"format": BM25_FORMAT, "format_version": BM25_FORMAT_VERSION, "k": self.k}
        settings |= {"stem": self.stem, "remove_stopwords": self.remove_stopwords}
        digest = write_new_file(path / DOCUMENTS_FILE, documents)  # never rewritten in place
        if isinstance(self.documents, StoredDocuments):  # a FAISS store of them links the file
            written = os.stat(path / DOCUMENTS_FILE)
            self.documents.file = path / DOCUMENTS_FILE, digest, written.st_ino, written.st_mtime_ns
        (path / SETTINGS_FILE).write_text(json.dumps(settings, indent=2), "utf-8")
        return path

    @classmethod
    def load(
        cls, directory: str | Path, same_as: StoredDocuments | None = None, **kwargs: Any
    ) -> BM25Retriever:
        """A retriever :meth:`save` wrote (no pickle; ``kwargs`` override fields, e.g. ``k``);
        ``same_as``: an index's FAISS docstore columns, taken if ``documents.json`` has its bytes."""
        path = Path(directory)
        if not (path / SETTINGS_FILE).exists():
            raise FileNotFoundError(f"no BM25 {SETTINGS_FILE} in {path} ({signing.STORE_HINT})")
        settings = _read_json(path / SETTINGS_FILE)
        if not isinstance(settings, dict) or settings.get("format") != BM25_FORMAT:
            raise ValueError(f"{path / SETTINGS_FILE} is not a BM25Retriever settings file")
        try:
            index, counts = _read_bm25s_index(path)
            if counts is not None and counts.shape != index.scores["data"].shape:
                raise ValueError(f"{path / COUNTS_FILE} is not one term count a score")
        except FileNotFoundError:
            raise
        except (ValueError, TypeError, EOFError, LookupError, OSError) as error:  # foreign files
            raise ValueError(
                f"{path}: the bm25s index files are corrupt or incomplete "
                f"({type(error).__name__}: {error}); rebuild the index"
            ) from error
        documents, total, file = same_as, int(index.scores["num_docs"]), path / DOCUMENTS_FILE
        if not (documents and documents.file and len(documents) == total) or not (
            os.path.samefile(file, documents.file[0]) or has_digest(file, documents.file[1])
        ):
            stored = _read_json(file)
            if isinstance(stored, list) and all(isinstance(entry, dict) for entry in stored):
                stored = {  # format 1: a list of Document fields
                    "ids": [entry.get("id") for entry in stored],
                    "texts": [entry.get("page_content") for entry in stored],
                    "metadatas": [entry.get("metadata", {}) for entry in stored],
                }
            documents = stored_documents(stored, file, total)
        fields = {name: settings[name] for name in ("k", "stem", "remove_stopwords")}
        return cls(documents=documents, index=index, counts=counts, **{**fields, **kwargs})


def _scored_index(
    template: Any, keys: Any, counts: Any, lengths: Any, vocabulary: dict[str, int]
) -> Any:
    """A bm25s index with ``template``'s parameters from sorted posting ``keys`` (term id << 32 |
    document), their term ``counts`` and the documents' ``lengths``: the scores ``BM25.index``
    gives the same tokens (bm25s's formulas), a million postings at a time."""
    import numpy as np
    from bm25s import scoring

    index = type(template)(**{name: getattr(template, name) for name in _BM25S_PARAMETERS})
    frequencies = np.diff(np.searchsorted(keys, np.arange(len(vocabulary) + 1) << 32))
    used = frequencies > 0  # terms only removed documents had are dropped
    renumbered = np.cumsum(used) - 1
    frequencies = frequencies[used]
    indices, total = (keys & 0xFFFFFFFF).astype(index.int_dtype), len(lengths)
    idf_of = scoring._select_idf_scorer(index.idf_method)
    tfc_of = scoring._select_tfc_scorer(index.method)
    shape = {"k1": index.k1, "b": index.b, "delta": index.delta, "l_avg": lengths.mean()}
    exact_idf = np.array([idf_of(df, N=total) for df in frequencies.tolist()])
    idf = exact_idf.astype(index.dtype)
    index.nonoccurrence_array = None
    if index.method in index.methods_requiring_nonoccurrence:  # bm25l, bm25+
        nonoccurrence = exact_idf * tfc_of(tf_array=0, l_d=shape["l_avg"], **shape)
        index.nonoccurrence_array = nonoccurrence.astype(index.dtype)
    scores = np.empty(len(keys), index.dtype)
    for part in (slice(start, start + (1 << 20)) for start in range(0, len(keys), 1 << 20)):
        terms, tf = renumbered[keys[part] >> 32], counts[part].astype(index.dtype)
        scored = idf[terms] * tfc_of(tf_array=tf, l_d=lengths[indices[part]], **shape)
        if index.nonoccurrence_array is not None:
            scored -= index.nonoccurrence_array[terms]
        scores[part] = scored
    index.scores = {
        "data": scores,
        "indices": indices,
        "indptr": np.concatenate([[0], np.cumsum(frequencies)]),
        "num_docs": total,
    }
    numbers, flags = renumbered.tolist(), used.tolist()
    index.vocab_dict = {term: numbers[i] for term, i in vocabulary.items() if flags[i]}
    index.unique_token_ids_set = set(index.vocab_dict.values())
    return index


def _read_bm25s_index(path: Path) -> tuple[Any, Any]:
    """What ``bm25s.BM25.save`` wrote in ``path``, and the term counts (None before format 3),
    each parsed from the descriptor checked (``BM25.load`` opens them again by name)."""
    numpy = require_extra("numpy", "bm25")

    def array(name: str) -> Any:
        with open_regular_file(path / name) as file:
            return numpy.load(file, allow_pickle=False)

    parameters = _read_json(path / "params.index.json")
    given = {name: parameters[name] for name in _BM25S_PARAMETERS if name in parameters}
    index = require_extra("bm25s", "bm25").BM25(**given)
    index.vocab_dict = dict(_read_json(path / "vocab.index.json"))
    index.unique_token_ids_set = set(index.vocab_dict.values())
    data, indices, indptr = (array(f"{key}.csc.index.npy") for key in ("data", "indices", "indptr"))
    index.scores = dict(data=data, indices=indices, indptr=indptr, num_docs=parameters["num_docs"])
    nonoccurring = index.method in index.methods_requiring_nonoccurrence  # bm25l, bm25+
    index.nonoccurrence_array = array("nonoccurrence_array.index.npy") if nonoccurring else None
    terms = numpy.fromiter(index.vocab_dict.values(), numpy.int64, len(index.vocab_dict))
    if not (  # bm25s's numba scoring indexes with these unchecked: out of range, it wrote anywhere
        indptr[-1] == len(data) == len(indices)
        and (numpy.diff(indptr, prepend=0) >= 0).all()  # from 0 up to there, never down
        and ((indices >= 0) & (indices < parameters["num_docs"])).all()
        and ((terms >= 0) & (terms < len(indptr) - 1)).all()
        and (not nonoccurring or len(index.nonoccurrence_array) == len(indptr) - 1)
    ):
        raise ValueError("the score matrix does not fit its documents and terms")
    return index, array(COUNTS_FILE) if (path / COUNTS_FILE).exists() else None


def _read_json(path: Path) -> Any:
    with open_regular_file(path) as file:  # FileNotFoundError naming it if missing
        try:
            return read_columns(file)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
            raise ValueError(f"{path} is not valid JSON (corrupt?): {error}") from error
