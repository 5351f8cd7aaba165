"""hybrid_retriever: real BM25 (bm25s) plus real FAISS, fused; both sides must contribute."""

from __future__ import annotations

import copy
import math
import re

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever

from rag_fusion_chain.fusion import (
    FUSION_SCORE_KEY,
    DistBasedScoreFusion,
    ReciprocalRankFusion,
    RelativeScoreFusion,
)
from rag_fusion_chain.retrievers.bm25 import BM25Retriever
from rag_fusion_chain.retrievers.hybrid import DEFAULT_FETCH_K, hybrid_retriever
from rag_fusion_chain.retrievers.stores import VectorRetriever, build_faiss

CONCEPTS = {
    "car": 0,
    "automobile": 0,
    "vehicle": 0,
    "engine": 1,
    "motor": 1,
    "bicycle": 2,
    "chain": 2,
    "pasta": 3,
    "water": 3,
}
"""Synonyms share a dimension, so vector search finds paraphrases BM25 cannot."""

DOCUMENTS = [
    Document("Car tires", id="car"),
    Document("An automobile motor overheated", id="automobile"),
    Document("Spec sheet of model XJ220", id="xj220"),
    Document("A bicycle chain snapped", id="bicycle"),
    Document("Boil pasta in salted water", id="pasta"),
]


class ConceptEmbeddings(Embeddings):
    """Bag of concepts: one dimension per synonym group, one for every unknown word."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * (len(set(CONCEPTS.values())) + 1)
        for word in re.findall(r"\w+", text.lower()):
            vector[CONCEPTS.get(word, len(vector) - 1)] += 1.0
        norm = math.sqrt(sum(value * value for value in vector)) or 1.0
        return [value / norm for value in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


@pytest.fixture
def embeddings() -> ConceptEmbeddings:
    return ConceptEmbeddings()


@pytest.fixture
def vectors(embeddings: ConceptEmbeddings) -> VectorRetriever:
    return VectorRetriever(vectorstore=build_faiss(DOCUMENTS, embeddings), k=2)


def ids(documents: list[Document]) -> list[str | None]:
    return [document.id for document in documents]


def test_each_side_alone_misses_what_the_other_finds(vectors: VectorRetriever) -> None:
    keyword = BM25Retriever.from_documents(DOCUMENTS, k=2)
    assert ids(keyword.invoke("car XJ220")) == ["car", "xj220"]
    assert ids(vectors.invoke("car XJ220")) == ["car", "automobile"]


def test_hybrid_fuses_keyword_and_vector_results(vectors: VectorRetriever) -> None:
    retriever = hybrid_retriever(DOCUMENTS, vectors, fusion=ReciprocalRankFusion(), k=3, fetch_k=2)
    assert isinstance(retriever, BaseRetriever)
    results = retriever.invoke("car XJ220")
    assert ids(results)[0] == "car"  # found by both
    assert set(ids(results)) == {"car", "xj220", "automobile"}  # one from each side alone
    fused = [document.metadata[FUSION_SCORE_KEY] for document in results]
    assert fused == sorted(fused, reverse=True)
    assert fused == pytest.approx([2 / 61, 1 / 62, 1 / 62])  # RRF, k=60: ranks 1+1, 2, 2
    assert all("score" in document.metadata for document in results)


def test_weights_decide_between_one_sided_hits(vectors: VectorRetriever) -> None:
    rrf = ReciprocalRankFusion()
    keyword_heavy = hybrid_retriever(DOCUMENTS, vectors, rrf, weights=[3.0, 1.0], k=3, fetch_k=2)
    vector_heavy = hybrid_retriever(DOCUMENTS, vectors, rrf, weights=[1.0, 3.0], k=3, fetch_k=2)
    assert ids(keyword_heavy.invoke("car XJ220"))[1] == "xj220"
    assert ids(vector_heavy.invoke("car XJ220"))[1] == "automobile"


def test_fusion_is_a_parameter(vectors: VectorRetriever) -> None:
    retriever = hybrid_retriever(DOCUMENTS, vectors, fusion=RelativeScoreFusion(), k=3, fetch_k=2)
    results = retriever.invoke("car XJ220")
    assert ids(results)[0] == "car"
    # relative score fusion: min-max per list (best = 1, worst = 0), averaged over the lists
    assert [document.metadata[FUSION_SCORE_KEY] for document in results] == pytest.approx(
        [1.0, 0.0, 0.0]
    )


def test_k_at_invoke_time_and_composition(vectors: VectorRetriever) -> None:
    bm25 = BM25Retriever.from_documents(DOCUMENTS, k=2)
    retriever = hybrid_retriever(bm25, vectors, k=3)
    assert len(retriever.invoke("car XJ220", k=1)) == 1
    batched = retriever.batch(["car XJ220", "pasta"])
    assert ids(batched[1])[0] == "pasta"
    assert ids(retriever.map().invoke(["car XJ220"])[0]) == ids(retriever.invoke("car XJ220"))
    with pytest.raises(ValueError, match="fetch_k"):
        hybrid_retriever(DOCUMENTS, vectors, fetch_k=0)


def test_one_embedding_call_per_query_and_no_mutation(
    vectors: VectorRetriever, embeddings: ConceptEmbeddings
) -> None:
    snapshot = copy.deepcopy(DOCUMENTS)
    retriever = hybrid_retriever(DOCUMENTS, vectors, k=3, fetch_k=2)
    embeddings.calls.clear()
    retriever.invoke("automobile engine")
    assert embeddings.calls == [1]
    assert snapshot == DOCUMENTS
    assert ids(retriever.invoke("automobile engine"))[0] == "automobile"


async def test_async_matches_sync(vectors: VectorRetriever) -> None:
    retriever = hybrid_retriever(DOCUMENTS, vectors, k=3, fetch_k=2)
    assert await retriever.ainvoke("car XJ220") == retriever.invoke("car XJ220")


def test_default_is_distribution_based_fusion_over_deep_candidate_lists(
    vectors: VectorRetriever,
) -> None:
    retriever = hybrid_retriever(DOCUMENTS, vectors, k=2)
    assert isinstance(retriever.fusion, DistBasedScoreFusion)
    assert retriever.retrievers.k == max(2, DEFAULT_FETCH_K)
    assert len(retriever.invoke("car XJ220")) == 2
