"""A LangChain user new to the kit (newcomer34): LangChain's own keywords given to the kit's
parts, and what the offline answers claim. Each test's docstring says the defect it pinned."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from pydantic import ValidationError

from rag_fusion_chain.retrievers import BM25Retriever, VectorRetriever, build_faiss

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
    build: object, keyword: str
) -> None:
    """VectorRetriever(search_kwargs={"k": 1, "filter": ...}) (as LangChain's as_retriever takes
    it) was accepted and ignored: 5 documents of every tenant came back."""
    with pytest.raises(ValidationError, match=keyword):
        build()  # type: ignore[operator]
