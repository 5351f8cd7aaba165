"""A LangChain user new to the kit (newcomer34): LangChain's own keywords given to the kit's
parts, and what the offline answers claim. Each test's docstring says the defect it pinned."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.runnables import RunnableLambda
from pydantic import ValidationError

from rag_fusion_chain import decomposition_chain, rag_fusion_chain, step_back_chain
from rag_fusion_chain.offline import OFFLINE_LABEL, SINGLE_CLAUSE_NOTE
from rag_fusion_chain.retrievers import BM25Retriever, VectorRetriever, build_faiss

QUESTION = "How do heat pumps work in winter?"
TENANTS = [Document(f"heat pump note {i}", metadata={"tenant": i % 2}) for i in range(6)]


@pytest.mark.parametrize(
    ("build", "keyword"),
    [
        (
            lambda: VectorRetriever(
                vectorstore=build_faiss(TENANTS, DeterministicFakeEmbedding(size=8)),
                search_kwargs={"k": 1, "filter": {"tenant": 0}},
            ),
            "search_kwargs",
        ),
        (
            lambda: BM25Retriever.from_documents(TENANTS, preprocess_func=str.split),
            "preprocess_func",
        ),
    ],
)
def test_a_langchain_keyword_the_kits_retriever_lacks_is_refused_not_ignored(
    build: Callable[[], object], keyword: str
) -> None:
    """VectorRetriever(search_kwargs={"k": 1, "filter": ...}) (as LangChain's as_retriever takes
    it) was accepted and ignored: 5 documents of every tenant came back."""
    with pytest.raises(ValidationError, match=keyword):
        build()


def test_the_offline_step_back_answer_does_not_deny_the_passages_its_question_found() -> None:
    """When the broader question found the passages the question had found (so they are quoted
    once, above), the answer said "(no passage came back for it)"."""
    found = [
        Document("Heat pumps move heat from outside air into a house in winter."),
        Document("Ground-source heat pumps draw heat from the soil, which stays warm."),
    ]
    chain = step_back_chain(RunnableLambda(lambda query: found), None, return_sources=True)
    result = chain.invoke(QUESTION)
    assert len(result["queries"]) == 2 and len(result["documents"]) == 2
    assert "no passage came back" not in result["answer"]
    assert result["answer"].endswith("- (nothing to quote beyond the passages above)")


@pytest.mark.parametrize(
    "question",
    ["How does BM25 differ from dense retrieval?", "Which is better, heat pumps or solar panels?"],
)
def test_the_offline_decomposition_does_not_call_a_comparison_a_single_clause(
    question: str,
) -> None:
    """A comparison the offline splitter does not recognise was answered under "The question is
    a single clause with no comparison": a claim about the user's question that was false."""
    found = [Document("BM25 ranks by terms. Dense retrieval ranks by embeddings. Heat pumps heat.")]
    answer = decomposition_chain(RunnableLambda(lambda query: found), None).invoke(question)
    assert "single clause" not in answer and "no comparison" not in answer
    assert answer.splitlines()[0] == f"{OFFLINE_LABEL} {SINGLE_CLAUSE_NOTE}"
    assert SINGLE_CLAUSE_NOTE.startswith("No comparison or second clause was recognised")


def test_an_offline_chain_has_one_run_named_fuse_the_step() -> None:
    """The offline query step ranked the question's passages through the fusion runnable, a run
    also named "fuse" inside generate_queries: astream_events(include_names=["fuse"]) gave that
    list of every Document the question found (not bounded by top_n) first, then the step's."""
    found = [Document(f"Heat pumps work in winter, note {number}.") for number in range(6)]
    chain = rag_fusion_chain(RunnableLambda(lambda query: found), None, top_n=2)

    async def fuse_outputs() -> list[object]:
        events = chain.astream_events(QUESTION, version="v2", include_names=["fuse"])
        return [
            event["data"]["output"] async for event in events if event["event"] == "on_chain_end"
        ]

    (state,) = asyncio.run(fuse_outputs())
    assert isinstance(state, dict) and len(state["documents"]) == 2
