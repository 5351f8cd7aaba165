"""Hybrid retrieval: BM25 finds exact terms (names, codes) that embeddings blur, vectors find
paraphrases that share no term; both lists fused into one ``BaseRetriever``."""

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


def hybrid_retriever(
    documents_or_bm25: Sequence[Document] | BaseRetriever,
    vector_retriever: BaseRetriever,
    fusion: BaseFusion | None = None,
    weights: Sequence[float] | None = None,
    k: int = DEFAULT_K,
    *,
    fetch_k: int | None = None,
) -> FusionRetriever:
    """Keyword and vector results fused (``fusion_score``): ``documents_or_bm25`` documents to
    index with :class:`BM25Retriever` (the vector side's, so a chunk both find is merged) or a
    keyword retriever; ``weights`` ``[keyword, vector]``; ``k`` fused documents returned (also per
    call); ``fetch_k`` candidates per side, default ``max(k, DEFAULT_FETCH_K)``. The default
    fusion, distribution-based with equal weights, beat RRF on SciFact (README: Results)."""
    validate_count("k", k)
    candidates = max(k, DEFAULT_FETCH_K) if fetch_k is None else validate_count("fetch_k", fetch_k)
    if isinstance(documents_or_bm25, BaseRetriever):
        keyword_retriever = documents_or_bm25
    else:
        keyword_retriever = BM25Retriever.from_documents(documents_or_bm25, k=candidates)
    fan_out = MultiRetriever([keyword_retriever, vector_retriever], weights=weights, k=candidates)
    fusion = fusion if fusion is not None else DistBasedScoreFusion()
    return FusionRetriever(name="hybrid", retrievers=fan_out, fusion=fusion, k=k)
