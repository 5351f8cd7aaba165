"""Hybrid retrieval: BM25 keyword search and vector search, fused into one ranked list.

Keyword search finds exact terms (names, codes, rare words) that embeddings blur; vector search
finds paraphrases that share no term with the query. The hybrid retriever runs both side by side
(a :class:`~rag_fusion_chain.retrievers.fanout.MultiRetriever`) and fuses their lists (a
:class:`~rag_fusion_chain.retrievers.fanout.FusionRetriever` without query generation), so it is
a ``BaseRetriever`` that composes anywhere a retriever goes.
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
"""Candidates per retriever before fusion: score normalisation needs a list deep enough to
estimate its spread, and 100 is what the SciFact evaluation used."""


def default_hybrid_fusion() -> BaseFusion:
    """The fusion used when none is given: distribution-based score fusion, equal weights.

    Chosen from evidence (``benchmarks/results/scifact_sweep.md``): on SciFact with BM25 +
    all-MiniLM-L6-v2, top 100 per list, mean ± 3σ score fusion gave nDCG@10 0.7303 against
    0.7140 for RRF k=60 (paired t-test p = 0.0066) and won on both halves of a 2-fold split.
    """
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
    """A retriever fusing keyword (BM25) and vector results; each document gets ``fusion_score``.

    Args:
        documents_or_bm25: the documents to index with :class:`BM25Retriever`, or a ready keyword
            retriever (any ``BaseRetriever``).
        vector_retriever: the dense retriever, e.g. a
            :class:`~rag_fusion_chain.retrievers.stores.VectorRetriever`; give both retrievers
            the same documents (same ids) so that fusion merges a chunk both of them find.
        fusion: a fusion runnable returning Documents; default :func:`default_hybrid_fusion`.
        weights: ``[keyword, vector]`` weights, e.g. ``[1.0, 2.0]`` to favour vectors.
        k: fused documents returned (override per call: ``invoke(query, k=3)``).
        fetch_k: candidates asked from each retriever before fusion; default
            ``max(k, DEFAULT_FETCH_K)``.

    >>> retriever = hybrid_retriever(documents, VectorRetriever(vectorstore=store))  # doctest: +SKIP
    >>> retriever.invoke("heat pump efficiency", k=3)  # doctest: +SKIP
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
