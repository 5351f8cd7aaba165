"""Hybrid retrieval: BM25 keyword search and vector search side by side, fused into one list.

Keywords find exact terms (names, codes) that embeddings blur; vectors find paraphrases that
share no term. The result is a ``BaseRetriever`` that composes anywhere a retriever goes.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from rag_fusion_chain.fusion import BaseFusion, DistBasedScoreFusion
from rag_fusion_chain.retrievers.bm25 import BM25Retriever
from rag_fusion_chain.retrievers.fanout import DEFAULT_K, MultiRetriever
from rag_fusion_chain.retrievers.fusion_retriever import FusionRetriever
from rag_fusion_chain.validation import validate_count

DEFAULT_FETCH_K = 100
"""Candidates per retriever before fusion: score normalisation needs deep lists (as in SciFact)."""


def default_hybrid_fusion() -> BaseFusion:
    """Distribution-based score fusion, equal weights: on SciFact (BM25 + MiniLM, top 100) it
    beat RRF k=60, nDCG@10 0.7303 vs 0.7140 (``benchmarks/results/scifact_sweep.md``)."""
    return DistBasedScoreFusion()


def hybrid_retriever(
    documents_or_bm25: Sequence[Document] | BaseRetriever,
    vector_retriever: BaseRetriever,
    fusion: BaseFusion | None = None,
    weights: Sequence[float] | None = None,
    k: int = DEFAULT_K,
    *,
    fetch_k: int | None = None,
) -> FusionRetriever:
    """A retriever fusing keyword and vector results (each document gets ``fusion_score``).

    ``documents_or_bm25``: documents to index with :class:`BM25Retriever`, or a ready keyword
    retriever; give both sides the same documents (ids) so fusion merges a chunk both find.
    ``weights``: ``[keyword, vector]``; ``k``: fused documents returned (also per call);
    ``fetch_k``: candidates per side, default ``max(k, DEFAULT_FETCH_K)``.

    >>> hybrid_retriever(documents, VectorRetriever(vectorstore=store)).invoke("heat pump", k=3)  # doctest: +SKIP
    """
    validate_count("k", k)
    candidates = max(k, DEFAULT_FETCH_K) if fetch_k is None else validate_count("fetch_k", fetch_k)
    if isinstance(documents_or_bm25, BaseRetriever):
        keyword_retriever = documents_or_bm25
    else:
        keyword_retriever = BM25Retriever.from_documents(documents_or_bm25, k=candidates)
    fan_out = MultiRetriever([keyword_retriever, vector_retriever], weights=weights, k=candidates)
    return FusionRetriever(
        name="hybrid",
        retrievers=fan_out,
        fusion=fusion if fusion is not None else default_hybrid_fusion(),
        k=k,
    )


__all__ = ["DEFAULT_FETCH_K", "default_hybrid_fusion", "hybrid_retriever"]
