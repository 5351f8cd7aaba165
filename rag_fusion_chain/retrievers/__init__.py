"""Retrievers: the fan-out, FusionRetriever, BM25, hybrid, vector stores, index directories.

Importing this package needs only langchain-core: the fan-out and FusionRetriever load at once,
the others (which need optional extras) on first access.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from rag_fusion_chain.retrievers.fanout import (
    DEFAULT_K,
    DEFAULT_TIMEOUT,
    MultiRetriever,
    RetrievalError,
    RetrievalFailure,
    RetrievalResults,
)
from rag_fusion_chain.retrievers.fusion_retriever import FusionRetriever

_LAZY_NAMES = {
    "BM25Retriever": ".bm25",
    "build_faiss": ".stores",
    "load_faiss": ".stores",
    "build_chroma": ".stores",
    "VectorRetriever": ".stores",
    "hybrid_retriever": ".hybrid",
    "build_index": ".index_directory",
    "open_index": ".index_directory",
    "OpenedIndex": ".index_directory",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value = getattr(import_module(_LAZY_NAMES[name], __name__), name)
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY_NAMES])


__all__ = [  # the names imported above, then the lazy ones
    "DEFAULT_K",
    "DEFAULT_TIMEOUT",
    "FusionRetriever",
    "MultiRetriever",
    "RetrievalError",
    "RetrievalFailure",
    "RetrievalResults",
    *_LAZY_NAMES,
]
