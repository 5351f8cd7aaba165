"""Streamed retrieval: queries searched while the model writes, on arrival, same results.

The fake chat model sleeps between tokens and every fake records what it does on one shared
timeline; the assertions are on the order of those events, never on durations.
"""

from __future__ import annotations

import asyncio
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
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import ConfigDict, Field

from rag_fusion_chain import chains, queries
from rag_fusion_chain.fusion import reciprocal_rank_fusion
from rag_fusion_chain.retrievers import FusionRetriever, MultiRetriever, RetrievalResults
from rag_fusion_chain.retrievers.bm25 import BatchedRetriever
from rag_fusion_chain.retrievers.fanout import StreamingInvoke
from rag_fusion_chain.retrievers.stores import VectorRetriever
from tests.test_fanout import Probe, RunCollector, TagRetriever, contents, walk

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
    )


def generator(
    timeline: Timeline, *, include_original: bool = False, token_delay: float = 0.01
) -> queries.QueryGenerator:
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


async def chunks_of(*chunks: Any) -> AsyncIterator[Any]:
    for chunk in chunks:
        yield chunk


# ---------------------------------------------------------------- overlap with generation


def test_the_first_search_starts_before_the_model_finishes() -> None:
    timeline = Timeline()
    retrieval = StreamingInvoke(
        generator(timeline, include_original=True)
        | MultiRetriever(RecordingRetriever(timeline=timeline))
    )
    retrieval.invoke(QUESTION)
    assert timeline.search_position(QUESTION) < timeline.position(MODEL_END)


def test_each_generated_query_is_searched_before_the_stream_ends_but_the_last() -> None:
    timeline = Timeline()
    retrieval = StreamingInvoke(
        generator(timeline) | MultiRetriever(RecordingRetriever(timeline=timeline))
    )
    results = retrieval.invoke(QUESTION)
    *early, last = GENERATED
    model_end = timeline.position(MODEL_END)
    assert all(timeline.search_position(query) < model_end for query in early)
    assert timeline.search_position(last) > model_end  # its line ends with the stream
    assert results.queries == GENERATED


async def test_async_searches_start_before_the_model_finishes() -> None:
    timeline = Timeline()
    retrieval = StreamingInvoke(
        generator(timeline, include_original=True)
        | MultiRetriever(RecordingRetriever(timeline=timeline))
    )
    results = await retrieval.ainvoke(QUESTION)
    model_end = timeline.position(MODEL_END)
    assert all(timeline.search_position(query) < model_end for query in [QUESTION, *GENERATED[:-1]])
    assert results.queries == [QUESTION, *GENERATED]


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


async def test_the_fusion_retriever_searches_while_the_model_writes() -> None:
    timeline = Timeline()
    retriever = FusionRetriever(
        retrievers=[RecordingRetriever(timeline=timeline)], query_generator=generator(timeline)
    )
    documents = await retriever.ainvoke(QUESTION)
    assert timeline.search_position(GENERATED[0]) < timeline.position(MODEL_END)
    assert len(documents) == 5


# ---------------------------------------------------------------- same results as invoke


@pytest.mark.parametrize("include_original", [False, True])
def test_streamed_results_equal_the_invoked_ones(include_original: bool) -> None:
    timeline = Timeline()
    fan_out = MultiRetriever(
        [RecordingRetriever(timeline=timeline, tag="a"), TagRetriever(tag="b", count=1)],
        weights=[2.0, 1.0],
    )
    invoked = fan_out.invoke(
        generator(timeline, include_original=include_original).invoke(QUESTION)
    )
    streamed = StreamingInvoke(
        generator(timeline, include_original=include_original) | fan_out
    ).invoke(QUESTION)
    assert described(streamed) == described(invoked)
    assert [ranked.weight for ranked in streamed] == [2.0, 1.0] * len(invoked.queries)
    assert streamed.queries == invoked.queries


def test_the_recipe_fuses_the_same_documents_streamed_or_not() -> None:
    timeline = Timeline()

    def recipe() -> Runnable[Any, Any]:
        fan_out = MultiRetriever(
            [RecordingRetriever(timeline=timeline, tag="a"), TagRetriever(tag="b")]
        )
        return generator(timeline, include_original=True) | fan_out | reciprocal_rank_fusion

    def identifiers(documents: list[Document]) -> list[str | None]:
        return [document.id for document in documents]

    expected = identifiers(recipe().invoke(QUESTION))
    assert identifiers(StreamingInvoke(recipe()).invoke(QUESTION)) == expected
    assert [identifiers(d) for d in StreamingInvoke(recipe()).batch([QUESTION])] == [expected]


def test_order_is_query_major_in_arrival_order_whatever_finishes_first() -> None:
    slow_first = TagRetriever(tag="s", count=1, delays={"q0": 0.15, "q1": 0.05})
    fan_out = MultiRetriever([slow_first, TagRetriever(tag="f", count=1)])
    expected = [["s:q0:0"], ["f:q0:0"], ["s:q1:0"], ["f:q1:0"], ["s:q2:0"], ["f:q2:0"]]
    for _ in range(3):
        (results,) = fan_out.transform(iter([["q0"], ["q1"], ["q2"]]))
        assert contents(results) == expected


async def test_async_transform_matches_invoke() -> None:
    fan_out = MultiRetriever([TagRetriever(tag="a", count=1), TagRetriever(tag="b", count=1)])
    streamed = [results async for results in fan_out.atransform(chunks_of(["x"], ["y", "z"]))]
    assert [contents(results) for results in streamed] == [
        contents(fan_out.invoke(["x", "y", "z"]))
    ]


# ---------------------------------------------------------------- dispatch on arrival
# Issue 10 changed the contract: a query that arrives while its retriever is busy is sent at once,
# beside the call in flight (it used to wait for that call to end and join the next batch).
# Queries share one call only when they are waiting together as it starts: one list, one chunk of
# several lines, or lines that arrived while its thread (or task) was not yet running.


def searched_once(calls: list[list[str]], expected: list[str]) -> bool:
    """Every expected query in exactly one call."""
    return sorted(query for call in calls for query in call) == sorted(expected)


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_each_query_is_embedded_at_once_even_while_an_embedding_call_is_in_flight(
    call: str,
) -> None:
    timeline = Timeline()
    # the first embedding call lasts until the last generated query is being embedded: a query
    # that waited for a busy call to end would stall it for the timeline's 5 s instead
    last = GENERATED[-1]
    embeddings = RecordingEmbeddings(
        size=16, timeline=timeline, first_call_waits_for=f"embed:{last}"
    )
    retrieval = StreamingInvoke(
        generator(timeline, include_original=True, token_delay=0.0)
        | MultiRetriever(vector_retriever(embeddings))
    )
    results = retrieval.invoke(QUESTION) if call == "invoke" else await retrieval.ainvoke(QUESTION)
    assert embeddings.calls[0][0] == QUESTION
    assert timeline.position(f"embed:{last}") < timeline.position(f"embedded:{QUESTION}")
    assert searched_once(embeddings.calls, [QUESTION, *GENERATED])
    assert results.queries == [QUESTION, *GENERATED]


@pytest.mark.parametrize("call", ["transform", "atransform"])
async def test_a_query_never_waits_for_a_busy_call_to_the_same_retriever(call: str) -> None:
    timeline = Timeline()
    # the first call lasts until the last query, which arrives after it started, is searched:
    # under the old rule that query waited for the first call to end (a 5 s stall here)
    retriever = RecordingRetriever(timeline=timeline, first_batch_waits_for="search:r:z")
    fan_out = MultiRetriever(retriever)

    def arrivals() -> Iterator[list[str]]:
        yield ["x"]
        timeline.wait_for("search:r:x")
        yield ["y"]
        yield ["z"]

    async def async_arrivals() -> AsyncIterator[list[str]]:
        yield ["x"]
        await asyncio.to_thread(timeline.wait_for, "search:r:x")
        yield ["y"]
        yield ["z"]

    if call == "transform":
        (results,) = fan_out.transform(arrivals())
    else:
        (results,) = [chunk async for chunk in fan_out.atransform(async_arrivals())]
    assert retriever.batches[0] == ["x"]  # y and z: one call or two, beside it
    assert searched_once(retriever.batches, ["x", "y", "z"])
    assert timeline.position("search:r:z") < timeline.position("done:r:x")
    assert results.queries == ["x", "y", "z"]


def test_queries_arriving_together_share_one_embedding_request() -> None:
    timeline = Timeline()
    embeddings = RecordingEmbeddings(size=16, timeline=timeline)
    fan_out = MultiRetriever(vector_retriever(embeddings))
    (results,) = fan_out.transform(iter([["x", "y"], ["z"]]))
    # z joins them if it came before their call's thread started, else has a call of its own
    assert embeddings.calls in ([["x", "y"], ["z"]], [["z"], ["x", "y"]], [["x", "y", "z"]])
    assert len(embeddings.calls) <= len(results.queries)


@pytest.mark.parametrize("call", ["transform", "atransform"])
async def test_queries_waiting_for_a_free_slot_go_together(call: str) -> None:
    # max_concurrency=1: the call for x holds the one slot until y and z have arrived; the call
    # started for y waits for the slot, z joins it, and both are searched in one request
    timeline = Timeline()
    retriever = RecordingRetriever(timeline=timeline, first_batch_waits_for="z sent")
    fan_out = MultiRetriever(retriever)
    config: RunnableConfig = {"max_concurrency": 1}

    def arrivals() -> Iterator[list[str]]:
        yield ["x"]
        timeline.wait_for("search:r:x")
        yield ["y"]
        yield ["z"]
        timeline.record("z sent")

    async def async_arrivals() -> AsyncIterator[list[str]]:
        yield ["x"]
        await asyncio.to_thread(timeline.wait_for, "search:r:x")
        yield ["y"]
        yield ["z"]
        timeline.record("z sent")

    if call == "transform":
        (results,) = fan_out.transform(arrivals(), config)
    else:
        (results,) = [chunk async for chunk in fan_out.atransform(async_arrivals(), config)]
    assert retriever.batches == [["x"], ["y", "z"]]
    assert contents(results) == [["r:x:0", "r:x:1"], ["r:y:0", "r:y:1"], ["r:z:0", "r:z:1"]]


@pytest.mark.parametrize("call", ["transform", "atransform"])
async def test_a_late_call_is_recorded_for_every_query_it_took(call: str) -> None:
    # x and y wait together for the one slot, held by w's call until after the time bound
    timeline = Timeline()
    retriever = RecordingRetriever(timeline=timeline, delay=0.3)
    fan_out = MultiRetriever([retriever, TagRetriever(tag="a", count=1)], timeout=0.1)
    config: RunnableConfig = {"max_concurrency": 1}
    with pytest.warns(UserWarning, match="failed for 3 of 3 queries"):
        if call == "transform":
            (results,) = fan_out.transform(iter([["w"], ["x"], ["y"]]), config)
        else:
            (results,) = [
                chunk async for chunk in fan_out.atransform(chunks_of(["w"], ["x"], ["y"]), config)
            ]
    assert [(failure.query, failure.error) for failure in results.failures] == [
        (query, "TimeoutError: no answer within 0.1 s") for query in ["w", "x", "y"]
    ]
    assert contents(results) == [["a:w:0"], ["a:x:0"], ["a:y:0"]]


def test_a_whole_list_is_one_batch_per_retriever_and_str_chunks_are_one_query() -> None:
    timeline = Timeline()
    retriever = RecordingRetriever(timeline=timeline)
    fan_out = MultiRetriever(retriever)
    (results,) = fan_out.transform(iter([["x", "y", "z"]]))
    (single,) = fan_out.transform(iter(["heat ", "pumps"]))
    assert retriever.batches == [["x", "y", "z"], ["heat pumps"]]
    assert results.queries == ["x", "y", "z"] and single.queries == ["heat pumps"]


@pytest.mark.parametrize("max_concurrency", [1, 2, 3])
def test_max_concurrency_bounds_the_streamed_searches(max_concurrency: int) -> None:
    probe = Probe()
    fan_out = MultiRetriever([TagRetriever(tag=f"r{i}", delay=0.03, probe=probe) for i in range(3)])
    config: RunnableConfig = {"max_concurrency": max_concurrency}
    (results,) = fan_out.transform(iter([["q0"], ["q1", "q2"], ["q3"]]), config)
    assert len(results) == 12
    assert probe.peak <= max_concurrency


# ---------------------------------------------------------------- failures and input errors


def test_a_failing_retriever_is_recorded_as_on_invoke() -> None:
    broken = TagRetriever(tag="down", name="broken", fail_on={"y"}, count=1)
    fan_out = MultiRetriever([TagRetriever(tag="a", count=1), broken])
    with pytest.warns(UserWarning, match="'broken' failed for 1 of 3 queries"):
        (results,) = fan_out.transform(iter([["x"], ["y"], ["z"]]))
    assert contents(results) == [["a:x:0"], ["down:x:0"], ["a:y:0"], ["a:z:0"], ["down:z:0"]]
    assert [(failure.source, failure.query) for failure in results.failures] == [("broken", "y")]


def test_on_error_raise_raises_from_the_stream_too() -> None:
    fan_out = MultiRetriever([TagRetriever(tag="down", fail_on={"*"})], on_error="raise")
    with pytest.raises(ConnectionError, match="down is down"):
        list(fan_out.transform(iter([["x"], ["y"]])))


def test_a_blank_query_in_the_stream_is_refused_with_its_position() -> None:
    fan_out = MultiRetriever(TagRetriever(tag="a"))
    with pytest.raises(ValueError, match="query 2 is ' '"):
        list(fan_out.transform(iter([["x", "y"], [" "]])))


def test_a_stream_mixing_str_and_list_chunks_is_refused() -> None:
    fan_out = MultiRetriever(TagRetriever(tag="a"))
    with pytest.raises(TypeError, match="either str chunks or lists"):
        list(fan_out.transform(iter(["x", ["y"]])))


def test_an_error_in_the_query_stream_is_raised_once_searches_in_flight_end() -> None:
    def failing() -> Iterator[list[str]]:
        yield ["x"]
        raise RuntimeError("the model went away")

    retriever = TagRetriever(tag="a", delay=0.05)
    with pytest.raises(RuntimeError, match="went away"):
        list(MultiRetriever(retriever).transform(failing()))
    assert retriever.calls == ["x"]


async def test_an_error_in_an_async_query_stream_is_raised() -> None:
    async def failing() -> AsyncIterator[list[str]]:
        yield ["x"]
        raise RuntimeError("the model went away")

    with pytest.raises(RuntimeError, match="went away"):
        async for _ in MultiRetriever(TagRetriever(tag="a", delay=0.05)).atransform(failing()):
            pass


# ---------------------------------------------------------------- tracing


def test_streaming_invoke_adds_no_run_and_keeps_the_step_names() -> None:
    timeline = Timeline()
    collector = RunCollector()
    retrieval = StreamingInvoke(
        generator(timeline) | MultiRetriever(RecordingRetriever(timeline=timeline))
    )
    retrieval.invoke(QUESTION, {"callbacks": [collector], "tags": ["mine"]})
    (root,) = collector.roots
    assert root.name == "RunnableSequence"
    assert [child.name for child in root.child_runs] == ["generate_queries", "retrieve"]
    retrieve = root.child_runs[1]
    assert retrieve.inputs == {"input": GENERATED}
    assert {child.run_type for child in retrieve.child_runs} == {"retriever"}
    assert all("mine" in run.tags for run in walk(root))
