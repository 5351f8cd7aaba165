"""The kit over the retrievers users already have (issue 10): LangChain's community BM25Retriever,
``InMemoryVectorStore.as_retriever()``, FAISS and Chroma built with their own ``from_documents``.

Each store gives the same passage its own id (or none), so these tests catch identity that looks at
ids: no duplicate passages, and the kit's RRF orders exactly as LangChain's ``EnsembleRetriever``
(``langchain_classic.retrievers``) for equal weights. The standard ``langchain-tests`` retriever
suite runs against the kit's own retrievers.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import uuid
import warnings
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_tests.integration_tests import RetrieversIntegrationTests

from rag_fusion_chain import fusion
from rag_fusion_chain.retrievers import (
    BM25Retriever,
    FusionRetriever,
    MultiRetriever,
    VectorRetriever,
    hybrid_retriever,
)
from rag_fusion_chain.retrievers.stores import build_faiss
from rag_fusion_chain.strategies import STRATEGIES

PASSAGES = [
    "Heat pumps move heat from cold outdoor air into a warm house.",
    "A heat pump's efficiency falls as the outdoor temperature drops.",
    "Solar panels turn sunlight into electricity with photovoltaic cells.",
    "Wind turbines convert the kinetic energy of wind into electricity.",
    "Ground source heat pumps use the stable temperature underground.",
    "Batteries store solar electricity for use at night.",
    "Insulation keeps heat inside a house in winter.",
    "Refrigerant circulates through the heat pump's compressor and coils.",
    "Tidal power uses the rise and fall of the sea.",
    "Air source heat pumps work in winter down to about minus twenty degrees.",
    "Geothermal plants use heat from deep underground to make electricity.",
    "Smart thermostats lower heating bills by learning a household's schedule.",
]
QUESTIONS = [
    "How do heat pumps work in winter?",
    "solar electricity at night",
    "underground heat",
]


class WordEmbeddings(Embeddings):
    """A small deterministic bag-of-words embedding: each word hashed into one of 64 dimensions,
    normalised. Offline, instant, and related texts are near each other."""

    size = 64

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.size
        for word in re.findall(r"[a-z]+", text.lower()):
            bucket = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big")
            vector[bucket % self.size] += 1.0
        norm = math.sqrt(sum(value * value for value in vector)) or 1.0
        return [value / norm for value in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def splits() -> list[Document]:
    """The same splits for every store, each with metadata but no id (the stores add theirs)."""
    return [
        Document(text, metadata={"source": f"notes-{index // 4}.md", "chunk": index})
        for index, text in enumerate(PASSAGES)
    ]


K = 4


@pytest.fixture(scope="module")
def community_retrievers() -> dict[str, BaseRetriever]:
    from langchain_chroma import Chroma

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community's sunset notice
        from langchain_community.retrievers import BM25Retriever as CommunityBM25
        from langchain_community.vectorstores import FAISS

    embeddings = WordEmbeddings()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        chroma = Chroma.from_documents(
            splits(), embeddings, collection_name=f"interop-{uuid.uuid4().hex}"
        )
        return {
            "bm25": CommunityBM25.from_documents(splits(), k=K),
            "in_memory": InMemoryVectorStore.from_documents(splits(), embeddings).as_retriever(
                search_kwargs={"k": K}
            ),
            "faiss": FAISS.from_documents(splits(), embeddings).as_retriever(
                search_kwargs={"k": K}
            ),
            "chroma": chroma.as_retriever(search_kwargs={"k": K}),
        }


PAIRS = [
    *itertools.combinations(["bm25", "in_memory", "faiss", "chroma"], 2),
    ("bm25", "in_memory", "faiss", "chroma"),
]


def texts(documents: list[Document]) -> list[str]:
    return [document.page_content for document in documents]


def ensemble(retrievers: list[BaseRetriever]) -> Any:
    from langchain_classic.retrievers import EnsembleRetriever

    return EnsembleRetriever(retrievers=retrievers, weights=[1.0] * len(retrievers))


def test_the_stores_give_the_same_passages_ids_of_their_own(
    community_retrievers: dict[str, BaseRetriever],
) -> None:
    """The premise: ids differ between stores (or are missing), so identity must not use them."""
    found = {
        name: {d.page_content: d.id for d in retriever.invoke(QUESTIONS[0])}
        for name, retriever in community_retrievers.items()
    }
    shared = set.intersection(*(set(by_text) for by_text in found.values()))
    assert shared, "the stores should agree on some passage"
    passage = next(iter(shared))
    assert len({found[name][passage] for name in found}) > 1


@pytest.mark.parametrize("names", PAIRS, ids="+".join)
@pytest.mark.parametrize("question", QUESTIONS)
def test_rrf_over_community_retrievers_has_no_duplicates_and_orders_as_ensemble_retriever(
    community_retrievers: dict[str, BaseRetriever], names: tuple[str, ...], question: str
) -> None:
    retrievers = [community_retrievers[name] for name in names]
    expected = texts(ensemble(retrievers).invoke(question))
    fused = texts((MultiRetriever(retrievers) | fusion.reciprocal_rank_fusion).invoke(question))
    assert len(set(fused)) == len(fused)
    assert fused == expected
    through_retriever = texts(FusionRetriever(retrievers=retrievers, k=100).invoke(question))
    assert through_retriever == expected


@pytest.mark.parametrize(
    "runnable",
    [
        fusion.reciprocal_rank_fusion,
        fusion.relative_score_fusion,
        fusion.dist_based_score_fusion,
        fusion.unique_union,
    ],
    ids=lambda runnable: type(runnable).__name__,
)
async def test_every_fusion_over_every_store_and_several_queries_keeps_one_copy_per_passage(
    community_retrievers: dict[str, BaseRetriever], runnable: fusion.BaseFusion
) -> None:
    fan_out = MultiRetriever(list(community_retrievers.values()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # community retrievers carry no scores
        fused = (fan_out | runnable).invoke(QUESTIONS)
        fused_async = await (fan_out | runnable).ainvoke(QUESTIONS)
    assert len(set(texts(fused))) == len(fused)
    assert texts(fused_async) == texts(fused)
    everything = {
        d.page_content
        for retriever in community_retrievers.values()
        for question in QUESTIONS
        for d in retriever.invoke(question)
    }
    assert set(texts(fused)) == everything


def test_the_first_appearance_keeps_its_metadata_and_id(
    community_retrievers: dict[str, BaseRetriever],
) -> None:
    faiss, bm25 = community_retrievers["faiss"], community_retrievers["bm25"]
    first_seen = {d.page_content: d for d in faiss.invoke(QUESTIONS[0])}
    for d in bm25.invoke(QUESTIONS[0]):
        first_seen.setdefault(d.page_content, d)
    fused = (MultiRetriever([faiss, bm25]) | fusion.reciprocal_rank_fusion).invoke(QUESTIONS[0])
    for document in fused:
        original = first_seen[document.page_content]
        assert document.id == original.id
        assert {**original.metadata, "fusion_score": document.metadata["fusion_score"]} == (
            document.metadata
        )


# ---------------------------------------------------------------- langchain-tests' standard suite


def kit_bm25(k: int = 3) -> BM25Retriever:
    return BM25Retriever.from_documents(splits(), k=k)


def kit_vectors(k: int = 3) -> VectorRetriever:
    return VectorRetriever(vectorstore=build_faiss(splits(), WordEmbeddings()), k=k)


def kit_hybrid(k: int = 3) -> FusionRetriever:
    return hybrid_retriever(splits(), kit_vectors(), k=k)


def kit_fusion(k: int = 3) -> FusionRetriever:
    return FusionRetriever(retrievers=[kit_bm25(10), kit_vectors(10)], k=k)


class TestKitBM25Standard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return kit_bm25  # type: ignore[return-value]

    @property
    def retriever_query_example(self) -> str:
        return QUESTIONS[0]


class TestKitVectorRetrieverStandard(TestKitBM25Standard):
    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return kit_vectors  # type: ignore[return-value]


class TestKitHybridStandard(TestKitBM25Standard):
    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return kit_hybrid  # type: ignore[return-value]


class TestKitFusionRetrieverStandard(TestKitBM25Standard):
    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return kit_fusion  # type: ignore[return-value]


# ---------------------------------------------------------------- the ready chains


@pytest.mark.parametrize("with_model", [True, False], ids=["model", "offline"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_ready_chain_over_community_retrievers_quotes_each_passage_once(
    community_retrievers: dict[str, BaseRetriever], strategy: str, with_model: bool
) -> None:
    from langchain_core.language_models import FakeListChatModel

    from rag_fusion_chain import chains

    replies = ["heat pumps in winter\nsolar electricity at night"]
    llm = FakeListChatModel(responses=replies) if with_model else None
    chain = chains.chain_for(
        strategy, list(community_retrievers.values()), llm, top_n=50, return_sources=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # community retrievers carry no scores
        result = chain.invoke(QUESTIONS[0])
    quoted = result["documents"]
    assert quoted, "the chain should find passages"
    assert len(set(texts(quoted))) == len(quoted)


def test_a_per_call_k_reaches_every_community_retriever(
    community_retrievers: dict[str, BaseRetriever],
) -> None:
    """README: k is the documents each of your retrievers returns per query. LangChain's BM25
    takes no ``k`` keyword (BaseRetriever drops it), so a chain's per-call k above its own ``k``
    field was silently ignored there (lcuser31)."""
    from rag_fusion_chain import chains

    chain = chains.retrieval_chain("rag-fusion", list(community_retrievers.values()), None)
    state = chain.invoke(QUESTIONS[0], {"configurable": {"k": K + 2}})
    assert {len(ranked) for ranked in state["retrieved"]} == {K + 2}
    assert community_retrievers["bm25"].k == K  # the user's retriever is not changed
