"""Concurrency of the fan-out and the ready chains: the question searched while the model
writes, one batch per retriever, one embedding request for all queries, late calls recorded.

The fake chat model sleeps between tokens and every fake records what it does on one shared
timeline; the assertions are on the order of those events, never on durations.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.runnables import Runnable
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import ConfigDict, Field

from rag_fusion_chain import chains, queries
from rag_fusion_chain.retrievers import MultiRetriever, RetrievalResults
from rag_fusion_chain.retrievers.bm25 import BatchedRetriever
from rag_fusion_chain.retrievers.stores import VectorRetriever
from tests.test_fanout import Probe, TagRetriever, contents

QUESTION = "How do heat pumps work?"
GENERATED = ["heat pump refrigerant cycle", "air source heat pump winter", "heat pump efficiency"]
MODEL_END = "model-end"

# ---------------------------------------------------------------- fakes


class Timeline:
    """Events recorded from every thread, in the order they happened."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.events: list[str] = []

    def record(self, event: str) -> None:
        with self.condition:
            self.events.append(event)
            self.condition.notify_all()

    def wait_for(self, event: str, timeout: float = 5.0) -> None:
        with self.condition:
            self.condition.wait_for(lambda: event in self.events, timeout)

    def position(self, event: str) -> int:
        """Where ``event`` first happened."""
        with self.condition:
            return self.events.index(event)

    def search_position(self, query: str) -> int:
        """Where the first search for ``query`` started, by any retriever."""
        with self.condition:
            return next(
                position
                for position, event in enumerate(self.events)
                if event.startswith("search:") and event.endswith(f":{query}")
            )


class SlowChatModel(GenericFakeChatModel):
    """Streams its scripted messages token by token, sleeping before each token; records on the
    timeline the moment it emits its last token (``model-end``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    timeline: Timeline
    token_delay: float = 0.01
    streaming: bool = False
    """Set True to have ``invoke`` stream (and so sleep) too, as a real client may."""

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        chunks = list(super()._stream(messages, stop, run_manager, **kwargs))
        for position, chunk in enumerate(chunks):
            time.sleep(self.token_delay)
            if position == len(chunks) - 1:
                self.timeline.record(MODEL_END)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._stream(messages, stop, **kwargs):
            yield chunk


class RecordingRetriever(BatchedRetriever):
    """Answers a batch of queries in one call, recording ``search:<tag>:<query>`` as it starts and
    ``done:<tag>:<query>`` as it ends; the first batch can wait until an event happened."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    timeline: Timeline
    tag: str = "r"
    k: int = 2
    delay: float = 0.0
    first_batch_waits_for: str | None = None
    batches: list[list[str]] = Field(default_factory=list)

    def _retrieve_many(
        self, queries: list[str], k: int, run_managers: Sequence[CallbackManagerForRetrieverRun]
    ) -> list[list[Document]]:
        self.batches.append(list(queries))
        for query in queries:
            self.timeline.record(f"search:{self.tag}:{query}")
        if len(self.batches) == 1 and self.first_batch_waits_for is not None:
            self.timeline.wait_for(self.first_batch_waits_for)
        time.sleep(self.delay)
        for query in queries:
            self.timeline.record(f"done:{self.tag}:{query}")
        return [
            [Document(f"{self.tag}:{query}:{i}", id=f"{self.tag}-{query}-{i}") for i in range(k)]
            for query in queries
        ]


class RecordingEmbeddings(DeterministicFakeEmbedding):
    """Records each ``embed_documents`` call, and ``embed:<text>`` / ``embedded:<text>`` on the
    timeline as it starts and ends; the first call can wait until an event happened."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    timeline: Timeline
    first_call_waits_for: str | None = None
    calls: list[list[str]] = Field(default_factory=list)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        for text in texts:
            self.timeline.record(f"embed:{text}")
        if len(self.calls) == 1 and self.first_call_waits_for is not None:
            self.timeline.wait_for(self.first_call_waits_for)
        vectors = super().embed_documents(texts)
        for text in texts:
            self.timeline.record(f"embedded:{text}")
        return vectors


def slow_model(timeline: Timeline, *replies: str, token_delay: float = 0.01) -> SlowChatModel:
    return SlowChatModel(
        messages=iter(AIMessage(reply) for reply in replies),
        timeline=timeline,
        token_delay=token_delay,
        streaming=True,
    )


def generator(
    timeline: Timeline, *, include_original: bool = False, token_delay: float = 0.01
) -> Runnable[Any, list[str]]:
    model = slow_model(timeline, "\n".join(GENERATED), token_delay=token_delay)
    return queries.rag_fusion(model, n=len(GENERATED), include_original=include_original)


def vector_retriever(embeddings: RecordingEmbeddings) -> VectorRetriever:
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_documents([Document(f"heat pump note {i}", id=f"n{i}") for i in range(6)])
    return VectorRetriever(vectorstore=store, embeddings=embeddings, k=2)


def described(results: RetrievalResults) -> list[tuple[str | None, str | None, list[str]]]:
    """(query, source, document texts) of each ranked list."""
    return [
        (ranked.query, ranked.source, [document.page_content for document in ranked])
        for ranked in results
    ]


# ---------------------------------------------------------------- overlap with generation


def test_the_rag_fusion_chain_searches_the_question_while_the_model_writes() -> None:
    timeline = Timeline()
    llm = slow_model(timeline, "\n".join(GENERATED), "Heat pumps move heat [1].")
    chain = chains.rag_fusion_chain(
        RecordingRetriever(timeline=timeline), llm, n=3, include_original=True, return_sources=True
    )
    result = chain.invoke(QUESTION)
    assert timeline.search_position(QUESTION) < timeline.position(MODEL_END)
    assert result["queries"] == [QUESTION, *GENERATED]
    assert result["answer"] == "Heat pumps move heat [1]."


async def test_async_the_question_is_searched_while_the_model_writes() -> None:
    timeline = Timeline()
    llm = slow_model(timeline, "\n".join(GENERATED), "Heat pumps move heat [1].")
    chain = chains.multi_query_chain(
        RecordingRetriever(timeline=timeline), llm, n=3, return_sources=True
    )
    result = await chain.ainvoke(QUESTION)
    assert timeline.search_position(QUESTION) < timeline.position(MODEL_END)
    assert result["queries"] == [QUESTION, *GENERATED]


def test_the_generated_queries_go_to_each_retriever_in_one_batch() -> None:
    timeline = Timeline()
    first, second = (
        RecordingRetriever(timeline=timeline),
        RecordingRetriever(timeline=timeline, tag="s"),
    )
    llm = slow_model(timeline, "\n".join(GENERATED), "An answer.")
    chains.rag_fusion_chain([first, second], llm, n=3).invoke(QUESTION)
    # the question's search runs beside the model's: the two batches may come in either order
    assert sorted(first.batches) == sorted(second.batches) == sorted([[QUESTION], GENERATED])


def test_with_an_instant_model_every_query_is_searched_once() -> None:
    """The question's search, if it had not begun when the queries came, joins their batch."""
    timeline = Timeline()
    retriever = RecordingRetriever(timeline=timeline)
    llm = slow_model(timeline, "\n".join(GENERATED), "An answer.", token_delay=0.0)
    chains.rag_fusion_chain(retriever, llm, n=3).invoke(QUESTION)
    searched = [query for batch in retriever.batches for query in batch]
    assert sorted(searched) == sorted([QUESTION, *GENERATED])
    assert retriever.batches in ([[QUESTION, *GENERATED]], [[QUESTION], GENERATED])


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_vector_retriever_embeds_all_queries_in_one_request(call: str) -> None:
    embeddings = RecordingEmbeddings(size=16, timeline=Timeline())
    fan_out = MultiRetriever([vector_retriever(embeddings), TagRetriever(tag="a", count=1)])
    queries_searched = ["x", "y", "z"]
    if call == "invoke":
        results = fan_out.invoke(queries_searched)
    else:
        results = await fan_out.ainvoke(queries_searched)
    assert embeddings.calls == [queries_searched]
    assert results.queries == queries_searched and len(results) == 6


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_late_call_is_recorded_for_every_query_it_took(call: str) -> None:
    retriever = RecordingRetriever(timeline=Timeline(), delay=0.3)
    fan_out = MultiRetriever([retriever, TagRetriever(tag="a", count=1)], timeout=0.1)
    with pytest.warns(UserWarning, match="failed for 3 of 3 queries"):
        if call == "invoke":
            results = fan_out.invoke(["w", "x", "y"])
        else:
            results = await fan_out.ainvoke(["w", "x", "y"])
    assert [(failure.query, failure.error) for failure in results.failures] == [
        (query, "TimeoutError: no answer within 0.1 s") for query in ["w", "x", "y"]
    ]
    assert contents(results) == [["a:w:0"], ["a:x:0"], ["a:y:0"]]


@pytest.mark.parametrize("max_concurrency", [1, 2, 3])
def test_max_concurrency_bounds_the_chains_searches(max_concurrency: int) -> None:
    probe = Probe()
    retrievers = [TagRetriever(tag=f"r{i}", delay=0.03, probe=probe) for i in range(3)]
    llm = GenericFakeChatModel(messages=iter([AIMessage("a\nb\nc"), AIMessage("done")]))
    result = chains.rag_fusion_chain(retrievers, llm, n=3, return_sources=True).invoke(
        QUESTION, config={"max_concurrency": max_concurrency}
    )
    assert result["queries"] == [QUESTION, "a", "b", "c"]
    assert probe.peak <= max_concurrency
