"""Fan-out over several retrievers, and the fusion retriever: order, concurrency, weights, errors."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import FakeListChatModel
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import ConfigurableField, Runnable, RunnableConfig, RunnableLambda
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.schemas import Run
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import ConfigDict, Field

from rag_fusion_chain import queries
from rag_fusion_chain.fusion import ReciprocalRankFusion, reciprocal_rank_fusion
from rag_fusion_chain.retrievers import (
    FusionRetriever,
    MultiRetriever,
    RetrievalError,
    RetrievalResults,
)
from rag_fusion_chain.retrievers.fanout import in_background

# ---------------------------------------------------------------- helpers


class Probe:
    """Counts calls running at the same moment, across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0

    def __enter__(self) -> Probe:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self.lock:
            self.active -= 1


class TagRetriever(BaseRetriever):
    """Returns ``count`` documents ``"<tag>:<query>:<i>"``; can be slow, fail, or record calls."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tag: str
    count: int = 2
    delay: float = 0.0
    delays: dict[str, float] = Field(default_factory=dict)
    fail_on: set[str] = Field(default_factory=set)
    probe: Probe | None = None
    calls: list[str] = Field(default_factory=list)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        self.calls.append(query)
        if query in self.fail_on or "*" in self.fail_on:
            raise ConnectionError(f"{self.tag} is down")
        if self.probe is not None:
            with self.probe:
                time.sleep(self.delays.get(query, self.delay))
        else:
            time.sleep(self.delays.get(query, self.delay))
        return [
            Document(f"{self.tag}:{query}:{i}", id=f"{self.tag}-{query}-{i}")
            for i in range(self.count)
        ]


class SizedRetriever(BaseRetriever):
    """Takes ``k`` like a vector store retriever does, and records it."""

    received_k: list[int] = Field(default_factory=list)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
    ) -> list[Document]:
        self.received_k.append(k)
        return [Document(f"{query}:{i}") for i in range(k)]


class BatchingRetriever(TagRetriever):
    """Overrides batch/abatch, like a vector retriever that embeds all queries in one call."""

    batches: list[list[str]] = Field(default_factory=list)

    def batch(self, inputs: list[str], config: Any = None, **kwargs: Any) -> list[Any]:  # type: ignore[override]
        self.batches.append(list(inputs))
        return [[Document(f"batched:{query}")] for query in inputs]

    async def abatch(self, inputs: list[str], config: Any = None, **kwargs: Any) -> list[Any]:  # type: ignore[override]
        self.batches.append(list(inputs))
        return [[Document(f"batched:{query}")] for query in inputs]


class RunCollector(BaseTracer):
    """Keeps every finished root run; children hang off ``child_runs``."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: list[Run] = []

    def _persist_run(self, run: Run) -> None:
        self.roots.append(run)


def walk(run: Run) -> list[Run]:
    return [run, *(descendant for child in run.child_runs for descendant in walk(child))]


def contents(ranked_lists: Sequence[Sequence[Document]]) -> list[list[str]]:
    return [[document.page_content for document in ranked] for ranked in ranked_lists]


# ---------------------------------------------------------------- order and shape


def test_output_is_query_major_then_retriever_with_weights_queries_and_sources() -> None:
    fan_out = MultiRetriever([TagRetriever(tag="a"), TagRetriever(tag="b")], [2.0, 0.5])
    results = fan_out.invoke(["x", "y"])
    assert isinstance(results, RetrievalResults)
    assert contents(results) == [
        ["a:x:0", "a:x:1"],
        ["b:x:0", "b:x:1"],
        ["a:y:0", "a:y:1"],
        ["b:y:0", "b:y:1"],
    ]
    assert [(ranked.query, ranked.source, ranked.weight) for ranked in results] == [
        ("x", "TagRetriever[0]", 2.0),
        ("x", "TagRetriever[1]", 0.5),
        ("y", "TagRetriever[0]", 2.0),
        ("y", "TagRetriever[1]", 0.5),
    ]
    assert results.failures == []


def test_a_single_string_is_one_query_and_a_named_retriever_is_its_source() -> None:
    results = MultiRetriever(TagRetriever(tag="a", name="bm25")).invoke("solo")
    assert contents(results) == [["a:solo:0", "a:solo:1"]]
    assert results[0].source == "bm25"


def test_order_is_deterministic_whatever_finishes_first() -> None:
    slow_first = TagRetriever(tag="a", delays={"x": 0.08, "y": 0.0}, count=1)
    slow_second = TagRetriever(tag="b", delays={"x": 0.0, "y": 0.05}, count=1)
    fan_out = MultiRetriever([slow_first, slow_second])
    expected = [["a:x:0"], ["b:x:0"], ["a:y:0"], ["b:y:0"], ["a:z:0"], ["b:z:0"]]
    for _ in range(3):
        assert contents(fan_out.invoke(["x", "y", "z"])) == expected


async def test_async_order_matches_sync_order() -> None:
    fan_out = MultiRetriever(
        [TagRetriever(tag="a", delays={"x": 0.05}, count=1), TagRetriever(tag="b", count=1)]
    )
    assert contents(await fan_out.ainvoke(["x", "y"])) == contents(fan_out.invoke(["x", "y"]))


def test_empty_query_list_gives_empty_results() -> None:
    results = MultiRetriever([TagRetriever(tag="a")]).invoke([])
    assert results == [] and results.failures == []


# ---------------------------------------------------------------- concurrency


def probed_retrievers(probe: Probe, count: int = 2) -> list[TagRetriever]:
    return [TagRetriever(tag=f"r{i}", delay=0.04, probe=probe) for i in range(count)]


@pytest.mark.parametrize("max_concurrency", [1, 2, 4])
def test_concurrency_is_bounded_by_max_concurrency(max_concurrency: int) -> None:
    probe = Probe()
    fan_out = MultiRetriever(probed_retrievers(probe))
    results = fan_out.invoke(["q1", "q2", "q3", "q4"], {"max_concurrency": max_concurrency})
    assert len(results) == 8
    assert probe.peak == max_concurrency  # bounded, and the bound is used


@pytest.mark.parametrize("max_concurrency", [1, 3])
async def test_async_concurrency_is_bounded_by_max_concurrency(max_concurrency: int) -> None:
    probe = Probe()
    fan_out = MultiRetriever(probed_retrievers(probe, count=3))
    results = await fan_out.ainvoke(["q1", "q2", "q3"], {"max_concurrency": max_concurrency})
    assert len(results) == 9
    assert probe.peak == max_concurrency


def test_without_a_bound_every_pair_runs_at_once() -> None:
    probe = Probe()
    started = time.perf_counter()
    MultiRetriever(probed_retrievers(probe)).invoke(["q1", "q2", "q3"])
    assert probe.peak == 6
    assert time.perf_counter() - started < 0.2  # 6 calls of 0.04 s in about one slot


def test_a_retriever_that_overrides_batch_gets_all_queries_in_one_call() -> None:
    batching = BatchingRetriever(tag="vectors")
    results = MultiRetriever([batching, TagRetriever(tag="b", count=1)]).invoke(["x", "y"])
    assert batching.batches == [["x", "y"]]
    assert batching.calls == []  # invoke was never used
    assert contents(results) == [["batched:x"], ["b:x:0"], ["batched:y"], ["b:y:0"]]


async def test_a_retriever_that_overrides_abatch_gets_all_queries_in_one_call() -> None:
    batching = BatchingRetriever(tag="vectors")
    await MultiRetriever([batching]).ainvoke(["x", "y", "z"])
    assert batching.batches == [["x", "y", "z"]]


# ---------------------------------------------------------------- weights and k


@pytest.mark.parametrize(("weights", "winner"), [([3.0, 1.0], "first"), ([1.0, 3.0], "second")])
def test_weights_are_carried_to_fusion(weights: list[float], winner: str) -> None:
    first, second = Document("first", id="first"), Document("second", id="second")
    prefers_first = RunnableLambda(lambda query: [first, second], name="prefers_first")
    prefers_second = RunnableLambda(lambda query: [second, first], name="prefers_second")
    pipeline = MultiRetriever([prefers_first, prefers_second], weights=weights) | (
        reciprocal_rank_fusion
    )
    assert pipeline.invoke("q")[0].page_content == winner


def test_k_is_passed_to_retrievers_that_take_it_and_cuts_every_list() -> None:
    sized = SizedRetriever()
    unsized = TagRetriever(tag="u", count=6)
    plain = RunnableLambda(lambda query: [Document(f"l{i}") for i in range(5)])  # no k keyword
    results = MultiRetriever([sized, unsized, plain], k=3).invoke(["x"])
    assert sized.received_k == [3]
    assert [len(ranked) for ranked in results] == [3, 3, 3]


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_per_call_k_works_as_the_k_field_and_another_keyword_is_refused(call: str) -> None:
    """``invoke(queries, k=1)`` was ignored: every list kept its retriever's length."""
    plain = RunnableLambda(lambda query: [Document(f"l{i}") for i in range(5)])  # no k keyword
    fan_out = MultiRetriever([TagRetriever(tag="u", count=6), plain], k=3)

    async def run(**keywords: Any) -> Any:
        result = getattr(fan_out, call)(["x", "y"], **keywords)
        return await result if call == "ainvoke" else result

    assert [len(ranked) for ranked in await run(k=1)] == [1, 1, 1, 1]
    assert [len(ranked) for ranked in await run(k=None)] == [3, 3, 3, 3]  # None: the field's
    with pytest.raises(ValueError, match="k\n.*greater than 0"):
        await run(k=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'top_n'"):
        await run(top_n=1)
    sized = SizedRetriever()
    MultiRetriever([sized]).invoke("x", k=2)
    assert sized.received_k == [2]


async def test_a_sync_only_retriever_taking_k_gets_it_in_async_calls_too() -> None:
    """LangChain's async fallback takes no keyword: ``ainvoke(..., k=2)`` over a retriever with
    only a sync ``_get_relevant_documents(..., k)`` failed every call (a TypeError per query)."""
    from rag_fusion_chain import chains

    sized = SizedRetriever()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no failure warned about either
        results = await MultiRetriever([sized]).ainvoke(["a", "b"], k=2)
    assert contents(results) == [["a:0", "a:1"], ["b:0", "b:1"]]
    chain = chains.chain_for("rag-fusion", [sized], None, return_sources=True)
    output = await chain.ainvoke("heat pumps", {"configurable": {"k": 3}})
    assert output["failures"] == [] and sized.received_k[:2] == [2, 2]
    assert set(sized.received_k[2:]) == {3}


# ---------------------------------------------------------------- errors


def test_a_failing_retriever_warns_is_recorded_and_the_others_are_kept() -> None:
    broken = TagRetriever(tag="down", name="broken", fail_on={"*"})
    fan_out = MultiRetriever([TagRetriever(tag="a"), broken])
    with pytest.warns(UserWarning, match="'broken' failed for 2 of 2 queries.*ConnectionError"):
        results = fan_out.invoke(["x", "y"])
    assert contents(results) == [["a:x:0", "a:x:1"], ["a:y:0", "a:y:1"]]
    assert [(f.source, f.query) for f in results.failures] == [("broken", "x"), ("broken", "y")]
    assert results.failures[0].error == "ConnectionError: down is down"
    with pytest.warns(UserWarning, match=r"'broken' failed for 1 of 1 query \(ConnectionError"):
        fan_out.invoke("x")  # the count agrees with its noun ("1 of 1 queries" was said)


def test_on_error_record_keeps_the_failures_without_a_warning() -> None:
    broken = TagRetriever(tag="down", name="broken", fail_on={"*"})
    fan_out = MultiRetriever([TagRetriever(tag="a"), broken], on_error="record")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        results = fan_out.invoke(["x", "y"])
    assert [(f.source, f.query) for f in results.failures] == [("broken", "x"), ("broken", "y")]
    assert contents(results) == [["a:x:0", "a:x:1"], ["a:y:0", "a:y:1"]]


def test_a_failures_message_shown_in_warnings_and_results_hides_url_credentials() -> None:
    """An HTTP client's error names its URL (httpx: "... for url 'http://user:pw@host'"): the
    warning and the recorded failure (a served chain's "failures") show it without the password."""

    def unauthorised(query: str) -> list[Document]:
        raise PermissionError("401 for url 'http://reader:secret-pw@127.0.0.1:9/search'")

    fan_out = MultiRetriever([RunnableLambda(unauthorised, name="http"), TagRetriever(tag="a")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = fan_out.invoke("x")
    shown = [str(warning.message) for warning in caught] + [results.failures[0].error]
    assert all("127.0.0.1:9" in text and "secret-pw" not in text for text in shown), shown
    with pytest.raises(RetrievalError) as raised:
        MultiRetriever([RunnableLambda(unauthorised)]).invoke("x")
    assert "secret-pw" not in str(raised.value)


def test_a_failure_for_one_query_keeps_that_retrievers_other_queries() -> None:
    flaky = TagRetriever(tag="f", name="flaky", fail_on={"y"}, count=1)
    with pytest.warns(UserWarning, match="'flaky' failed for 1 of 2"):
        results = MultiRetriever([flaky]).invoke(["x", "y"])
    assert contents(results) == [["f:x:0"]]
    assert [failure.query for failure in results.failures] == ["y"]


class BrokenBatchRetriever(TagRetriever):
    """Its whole ``batch`` / ``abatch`` call raises, not one query's call."""

    def batch(self, inputs: list[str], config: Any = None, **kwargs: Any) -> list[Any]:  # type: ignore[override]
        raise ConnectionError("the batch endpoint is down")

    async def abatch(self, inputs: list[str], config: Any = None, **kwargs: Any) -> list[Any]:  # type: ignore[override]
        raise ConnectionError("the batch endpoint is down")


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_whole_call_that_raises_fails_every_query_of_that_retriever(call: str) -> None:
    fan_out = MultiRetriever([BrokenBatchRetriever(tag="b", name="batch"), TagRetriever(tag="a")])
    with pytest.warns(UserWarning, match="'batch' failed for 2 of 2 queries.*ConnectionError"):
        if call == "invoke":
            results = fan_out.invoke(["x", "y"])
        else:
            results = await fan_out.ainvoke(["x", "y"])
    assert contents(results) == [["a:x:0", "a:x:1"], ["a:y:0", "a:y:1"]]
    assert [(f.source, f.query) for f in results.failures] == [("batch", "x"), ("batch", "y")]
    assert all(isinstance(f.exception, ConnectionError) for f in results.failures)


async def test_async_failures_are_recorded_too() -> None:
    broken = TagRetriever(tag="down", name="broken", fail_on={"*"})
    with pytest.warns(UserWarning, match="broken"):
        results = await MultiRetriever([broken, TagRetriever(tag="a")]).ainvoke("x")
    assert [failure.source for failure in results.failures] == ["broken"]
    assert len(results) == 1


def test_on_error_raise_raises_the_retrievers_error() -> None:
    broken = TagRetriever(tag="down", fail_on={"*"})
    with pytest.raises(ConnectionError, match="down is down"):
        MultiRetriever([TagRetriever(tag="a"), broken], on_error="raise").invoke("x")


def test_when_every_retriever_fails_it_raises() -> None:
    fan_out = MultiRetriever(
        [TagRetriever(tag="one", fail_on={"*"}), TagRetriever(tag="two", fail_on={"*"})]
    )
    with pytest.raises(RetrievalError, match="every retriever failed") as raised:
        fan_out.invoke("x")
    assert len(raised.value.failures) == 2
    assert isinstance(raised.value.__cause__, ConnectionError)


def test_a_retriever_returning_something_else_is_a_failure() -> None:
    odd = RunnableLambda(lambda query: "not documents", name="odd")
    with pytest.warns(UserWarning, match="'odd' failed"):
        results = MultiRetriever([odd, TagRetriever(tag="a")]).invoke("x")
    assert results.failures[0].error.startswith("TypeError: a retriever must return")


def test_a_retriever_returning_document_score_pairs_is_told_to_use_as_retriever() -> None:
    pairs = RunnableLambda(lambda query: [(Document(query), 0.9)], name="pairs")  # *_with_score's
    mixed = RunnableLambda(lambda query: [Document(query), query], name="mixed")
    with pytest.raises(RetrievalError) as raised:
        MultiRetriever([pairs, mixed]).invoke("x")
    errors = [failure.error for failure in raised.value.failures]
    assert errors == [
        "TypeError: a retriever must return a list of Documents, got list holding a tuple "
        "((Document, score) pairs are similarity_search_with_score's: use as_retriever())",
        "TypeError: a retriever must return a list of Documents, got list holding a str",
    ]


def test_a_slow_retriever_times_out_and_the_others_are_kept() -> None:
    slow = TagRetriever(tag="slow", name="slow", delay=0.5)
    fan_out = MultiRetriever([slow, TagRetriever(tag="a", count=1)], timeout=0.1)
    started = time.perf_counter()
    with pytest.warns(UserWarning, match="'slow' failed.*TimeoutError"):
        results = fan_out.invoke(["x"])
    assert time.perf_counter() - started < 0.4
    assert contents(results) == [["a:x:0"]]
    assert results.failures[0].error == "TimeoutError: no answer within 0.1 s"


async def test_a_slow_retriever_times_out_in_async_too() -> None:
    slow = TagRetriever(tag="slow", name="slow", delay=0.5)
    fan_out = MultiRetriever([slow, TagRetriever(tag="a", count=1)], timeout=0.1)
    started = time.perf_counter()
    with pytest.warns(UserWarning, match="TimeoutError"):
        results = await fan_out.ainvoke(["x"])
    assert time.perf_counter() - started < 0.4
    assert [failure.source for failure in results.failures] == ["slow"]


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"retrievers": []}, ValueError, r"retrievers\n.*at least 1 item"),
        ({"retrievers": [object()]}, ValueError, r"retrievers\.0\n.*instance of Runnable"),
        ({"retrievers": "bm25"}, ValueError, r"retrievers\n.*valid list"),
        ({"retrievers": [object()], "weights": [1.0]}, ValueError, r"^1 validation error"),
        ({"weights": [1.0]}, ValueError, "weights: got 1 weight for 2 retrievers;"),
        (
            {"retrievers": [TagRetriever(tag="a")], "weights": [1, 2]},
            ValueError,
            "2 weights for 1 retriever;",
        ),
        ({"weights": [1.0, -1.0]}, ValueError, "weights"),
        ({"weights": [True, 1.0]}, TypeError, "weights must be numbers"),
        ({"weights": ["1", 2.0]}, TypeError, "weights must be numbers"),
        ({"k": 0}, ValueError, r"k\n.*greater than 0"),
        ({"k": True}, ValueError, r"k\n.*valid integer"),
        ({"k": "5"}, ValueError, r"k\n.*valid integer"),
        ({"timeout": 0}, ValueError, "timeout"),
        ({"on_error": "ignore"}, ValueError, "on_error"),
    ],
)
def test_invalid_settings_name_the_parameter(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    settings = {"retrievers": [TagRetriever(tag="a"), TagRetriever(tag="b")], **arguments}
    with pytest.raises(error, match=message):
        MultiRetriever(**settings)


@pytest.mark.parametrize("queries_input", ["", "  ", ["solar", " "]])
def test_blank_queries_are_refused(queries_input: Any) -> None:
    with pytest.raises(ValueError, match="queries must not be empty or whitespace"):
        MultiRetriever([TagRetriever(tag="a")]).invoke(queries_input)


def test_queries_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(TypeError, match="queries must be a str or a list of str"):
        MultiRetriever([TagRetriever(tag="a")]).invoke([1, 2])  # type: ignore[list-item]


# ---------------------------------------------------------------- call styles and tracing


async def test_every_call_style_gives_the_same_lists() -> None:
    fan_out = MultiRetriever([TagRetriever(tag="a", count=1), TagRetriever(tag="b", count=1)])
    expected = [["a:x:0"], ["b:x:0"], ["a:y:0"], ["b:y:0"]]
    assert contents(fan_out.invoke(["x", "y"])) == expected
    assert contents(await fan_out.ainvoke(["x", "y"])) == expected
    assert [contents(r) for r in fan_out.batch([["x", "y"], ["z"]])] == [
        expected,
        [["a:z:0"], ["b:z:0"]],
    ]
    assert [contents(r) for r in await fan_out.abatch([["x", "y"]])] == [expected]
    assert [contents(chunk) for chunk in fan_out.stream(["x", "y"])] == [expected]
    assert [contents(chunk) async for chunk in fan_out.astream(["x", "y"])] == [expected]


def test_schemas_are_published_for_serving() -> None:
    fan_out = MultiRetriever([TagRetriever(tag="a")])
    assert fan_out.input_schema.model_json_schema()["anyOf"][0] == {"type": "string"}
    assert fan_out.output_schema.model_json_schema()["type"] == "array"
    retriever = FusionRetriever(retrievers=fan_out)
    assert retriever.input_schema.model_json_schema()["type"] == "string"


def test_the_run_is_named_retrieve_with_one_child_run_per_retriever_call() -> None:
    collector = RunCollector()
    MultiRetriever([TagRetriever(tag="a"), TagRetriever(tag="b")]).invoke(
        ["x", "y"], {"callbacks": [collector]}
    )
    (root,) = collector.roots
    assert root.name == "retrieve"
    assert sorted(child.name for child in root.child_runs) == ["TagRetriever"] * 4
    assert all(child.run_type == "retriever" for child in root.child_runs)


@pytest.mark.parametrize("traced", [True, False])
def test_a_run_id_names_the_fan_outs_run_and_no_retriever_call(traced: bool) -> None:
    """With or without a handler, the run id is the fan-out's own: its retrievers' batches
    never get it (LangChain would warn that a batch uses it for one query only)."""
    collector, run_id = RunCollector(), uuid.uuid4()
    config: RunnableConfig = {"run_id": run_id, "callbacks": [collector] if traced else []}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MultiRetriever([TagRetriever(tag="a")]).invoke(["x", "y"], config)
    assert [run.id for run in collector.roots] == ([run_id] if traced else [])
    assert all(child.id != run_id for root in collector.roots for child in root.child_runs)


def test_a_bound_retrievers_runs_nest_under_the_fan_out_inside_a_sequence() -> None:
    """A bound retriever merges its config with the context's: the fan-out sets its own."""
    collector = RunCollector()
    bound = TagRetriever(tag="a").with_config(run_name="bound")
    fan_out = MultiRetriever([bound]).with_config(run_name="fan_out")
    (RunnableLambda(lambda query: query) | fan_out).invoke("x", {"callbacks": [collector]})
    (root,) = collector.roots
    (fan_out_run,) = [run for run in walk(root) if run.name == "fan_out"]
    assert [child.name for child in fan_out_run.child_runs] == ["bound"]


# ---------------------------------------------------------------- FusionRetriever


def fake_generator(text: str = "alpha\nbeta\ngamma", n: int = 3) -> Runnable[Any, list[str]]:
    return queries.rag_fusion(FakeListChatModel(responses=[text]), n=n)


def test_fusion_retriever_returns_its_default_k_and_honours_k_at_invoke_time() -> None:
    retriever = FusionRetriever(
        retrievers=[TagRetriever(tag="a", count=4), TagRetriever(tag="b", count=4)]
    )
    assert len(retriever.invoke("q")) == 5
    three = retriever.invoke("q", k=3)
    assert len(three) == 3
    assert all("fusion_score" in document.metadata for document in three)
    assert len(FusionRetriever(retrievers=TagRetriever(tag="a", count=4), k=2).invoke("q")) == 2


async def test_fusion_retriever_honours_k_in_async_and_batch() -> None:
    retriever = FusionRetriever(retrievers=[TagRetriever(tag="a", count=4)])
    assert len(await retriever.ainvoke("q", k=1)) == 1
    assert [len(documents) for documents in retriever.batch(["q", "r"], k=2)] == [2, 2]
    assert [len(documents) for documents in await retriever.abatch(["q"], k=3)] == [3]


def test_fusion_retriever_searches_with_the_generated_queries() -> None:
    recording = TagRetriever(tag="a", count=1)
    retriever = FusionRetriever(retrievers=[recording], query_generator=fake_generator())
    documents = retriever.invoke("question")
    assert sorted(recording.calls) == ["alpha", "beta", "gamma"]
    assert [document.page_content for document in documents] == [
        "a:alpha:0",
        "a:beta:0",
        "a:gamma:0",
    ]


def test_a_fusion_retrievers_fusion_weights_weigh_each_retriever_as_ensemble_retrievers() -> None:
    heavy, light = TagRetriever(tag="heavy", count=2), TagRetriever(tag="light", count=2)
    fusion = ReciprocalRankFusion(weights=[1.0, 0.01])
    retriever = FusionRetriever(
        retrievers=[heavy, light], query_generator=fake_generator(), fusion=fusion, k=6
    )  # three queries: six ranked lists, two weights
    documents = [document.page_content for document in retriever.invoke("question")]
    assert [text.split(":")[0] for text in documents] == ["heavy"] * 6
    with pytest.raises(ValueError, match="weights: got 3 weights for 2 retrievers"):
        FusionRetriever(retrievers=[heavy, light], fusion=ReciprocalRankFusion(weights=[1, 1, 1]))
    with pytest.raises(ValueError, match="weights given twice"):
        FusionRetriever(retrievers=MultiRetriever([heavy, light], weights=[1, 2]), fusion=fusion)


async def test_fusion_retriever_supports_every_call_style() -> None:
    retriever = FusionRetriever(
        retrievers=[TagRetriever(tag="a", count=1)], query_generator=fake_generator("one\ntwo", 2)
    )
    expected = ["a:one:0", "a:two:0"]

    def texts(documents: list[Document]) -> list[str]:
        return [document.page_content for document in documents]

    assert texts(retriever.invoke("q")) == expected
    assert texts(await retriever.ainvoke("q")) == expected
    assert [texts(d) for d in retriever.batch(["q", "q"])] == [expected, expected]
    assert [texts(d) for d in await retriever.abatch(["q"])] == [expected]
    assert [texts(d) for d in retriever.stream("q")] == [expected]
    assert [texts(d) async for d in retriever.astream("q")] == [expected]


def test_fusion_retriever_passes_max_concurrency_on_to_the_fan_out() -> None:
    probe = Probe()
    retriever = FusionRetriever(
        retrievers=probed_retrievers(probe), query_generator=fake_generator()
    )
    retriever.invoke("q", config={"max_concurrency": 1})
    assert probe.peak == 1


def test_fusion_retriever_traces_generate_retrieve_and_fuse_under_its_own_run() -> None:
    collector = RunCollector()
    retriever = FusionRetriever(
        retrievers=[TagRetriever(tag="a")], query_generator=fake_generator()
    )
    retriever.invoke("q", config={"callbacks": [collector], "tags": ["mine"]})
    (root,) = collector.roots
    assert root.name == "FusionRetriever" and root.run_type == "retriever"
    assert [child.name for child in root.child_runs] == ["generate_queries", "retrieve", "fuse"]
    assert all("mine" in run.tags for run in walk(root))


def test_a_fusion_retriever_from_llm_names_its_query_step_too() -> None:
    """The question kept beside the model's queries: was an unnamed ``RunnableSequence`` run."""
    collector = RunCollector()
    llm = FakeListChatModel(responses=["b\nc"])
    FusionRetriever.from_llm([TagRetriever(tag="a")], llm).invoke("q", {"callbacks": [collector]})
    (root,) = collector.roots
    assert [child.name for child in root.child_runs] == ["generate_queries", "retrieve", "fuse"]


def test_a_fusion_retriever_from_llm_traces_one_generate_queries_run_as_a_ready_chain() -> None:
    """lcuser33: the model's query step inside ``generate_queries`` was named ``generate_queries``
    too, so a LangSmith filter on that name found two runs per call (a ready chain names it
    ``queries``); the step itself, used alone, keeps its name."""
    collector, llm = RunCollector(), FakeListChatModel(responses=["b\nc"])
    FusionRetriever.from_llm([TagRetriever(tag="a")], llm).invoke("q", {"callbacks": [collector]})
    names = [run.name for run in walk(collector.roots[0])]
    assert names.count("generate_queries") == 1 and names.count("queries") == 1
    assert queries.rag_fusion(llm).get_name() == "generate_queries"


@pytest.mark.parametrize("strategy", ["rag-fusion", "multi-query"])
def test_a_fusion_retriever_from_llm_publishes_and_honours_n(strategy: str) -> None:
    """DESIGN: n / k are configurable fields of FusionRetriever, shown in config_schema();
    n worked per call but only k was published. The query step itself declares n."""
    llm = FakeListChatModel(responses=["b\nc\nd\ne"] * 2)
    retriever = FusionRetriever.from_llm([TagRetriever(tag="a", count=1)], llm, strategy=strategy)
    configurable = retriever.config_schema().model_json_schema()["$defs"]["Configurable"]
    assert set(configurable["properties"]) == {"k", "n"}
    assert set(queries.rag_fusion(llm).config_schema().model_json_schema()["properties"]) == {
        "configurable"
    }
    found = retriever.invoke("q", {"configurable": {"n": 2}})
    assert [document.page_content for document in found] == ["a:q:0", "a:b:0", "a:c:0"]
    hyde = FusionRetriever.from_llm([TagRetriever(tag="a")], llm, strategy="hyde")
    assert [spec.id for spec in hyde.config_specs] == ["k"]  # one passage: no n to set


async def test_a_fusion_retriever_takes_the_question_as_the_ready_chains_do() -> None:
    """A str or {"question": str}; the dict was "TypeError: unhashable type: 'dict'"."""
    retriever = FusionRetriever(retrievers=[TagRetriever(tag="a", count=1)])
    assert contents([retriever.invoke({"question": " q "})]) == [["a:q:0"]]
    assert contents([await retriever.ainvoke({"question": "q"})]) == [["a:q:0"]]
    for bad in ({"query": "q"}, "   ", 3):
        with pytest.raises((TypeError, ValueError), match="question"):
            retriever.invoke(bad)  # type: ignore[arg-type]


def test_fusion_retriever_drops_into_a_chain_with_a_vector_store() -> None:
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_documents([Document(f"passage {i}", id=f"p{i}") for i in range(8)])
    retriever = FusionRetriever(
        retrievers=MultiRetriever([store.as_retriever()], k=6),
        query_generator=fake_generator(),
        k=4,
    )
    chain = retriever | RunnableLambda(lambda documents: [d.id for d in documents])
    identifiers = chain.invoke("question")
    assert len(identifiers) == 4 and len(set(identifiers)) == 4


def test_fusion_retriever_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match=r"\nk\n.*greater than 0"):  # the field named
        FusionRetriever(retrievers=[TagRetriever(tag="a")], k=0)
    with pytest.raises(ValueError, match="with_scores"):
        FusionRetriever(
            retrievers=[TagRetriever(tag="a")], fusion=ReciprocalRankFusion(with_scores=True)
        )
    with pytest.raises(ValueError, match="k must be positive"):
        FusionRetriever(retrievers=[TagRetriever(tag="a")]).invoke("q", k=-1)


def test_fusion_retriever_warns_about_a_failing_retriever_and_still_answers() -> None:
    retriever = FusionRetriever(
        retrievers=[TagRetriever(tag="down", name="broken", fail_on={"*"}), TagRetriever(tag="a")]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        documents = retriever.invoke("q")
    assert [document.page_content for document in documents] == ["a:q:0", "a:q:1"]
    assert any("'broken' failed" in str(warning.message) for warning in caught)


def test_k_of_the_fan_out_is_configurable_per_call() -> None:
    sized = SizedRetriever()
    fan_out = MultiRetriever([sized]).configurable_fields(k=ConfigurableField(id="k"))
    config: RunnableConfig = {"configurable": {"k": 2}}
    assert [len(ranked) for ranked in fan_out.invoke("q", config)] == [2]
    assert sized.received_k == [2]


def test_fusion_retriever_k_is_configurable_per_call_and_published() -> None:
    # Issue 10: with_config(configurable={"k": 1}) used to be ignored (5 documents came back).
    retriever = FusionRetriever(retrievers=[TagRetriever(tag="a", count=4)], k=3)
    assert len(retriever.with_config(configurable={"k": 1}).invoke("q")) == 1
    assert len(retriever.invoke("q", {"configurable": {"k": 2}})) == 2
    assert len(retriever.invoke("q", {"configurable": {"k": 2}}, k=4)) == 4  # keyword wins
    assert len(retriever.invoke("q")) == 3
    schema = retriever.config_schema().model_json_schema()
    assert schema["$defs"]["Configurable"]["properties"]["k"]["default"] == 3
    assert [spec.id for spec in retriever.config_specs] == ["k"]
    with pytest.raises(ValueError, match="k must be positive"):
        retriever.invoke("q", {"configurable": {"k": 0}})


class HungRetriever(BaseRetriever):
    """Never answers until ``release`` is set (the test sets it, so no thread is left behind)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    release: threading.Event = Field(default_factory=threading.Event)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        self.release.wait(30)
        return [Document("too late")]


def test_every_retrieval_call_is_bounded_by_default() -> None:
    # Issue 13: nothing set a timeout, so a hung retriever hung chains, ask and serve forever.
    from rag_fusion_chain.retrievers import DEFAULT_TIMEOUT

    assert DEFAULT_TIMEOUT == 30
    assert MultiRetriever(TagRetriever(tag="a")).timeout == DEFAULT_TIMEOUT
    assert FusionRetriever(retrievers=[TagRetriever(tag="a")]).retrievers.timeout == 30
    assert MultiRetriever(TagRetriever(tag="a"), timeout=None).timeout is None


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_hung_retriever_times_out_and_the_others_are_still_fused(call: str) -> None:
    hung = HungRetriever(name="hung")
    fan_out = MultiRetriever([hung, TagRetriever(tag="a", count=2)], timeout=0.2)
    retriever = FusionRetriever(retrievers=fan_out, query_generator=fake_generator())
    try:
        with pytest.warns(UserWarning, match="'hung' failed for 3 of 3 queries.*TimeoutError"):
            if call == "invoke":
                documents = retriever.invoke("question")
            else:
                documents = await retriever.ainvoke("question")
    finally:
        hung.release.set()
    assert {document.page_content.split(":")[0] for document in documents} == {"a"}
    assert len(documents) == 5


def test_a_ready_chain_over_a_hung_retriever_answers_from_the_others() -> None:
    from rag_fusion_chain import chains

    hung = HungRetriever(name="hung")
    llm = FakeListChatModel(responses=["alpha\nbeta", "the answer"])
    fan_out = MultiRetriever([hung, TagRetriever(tag="a", count=2)], timeout=0.2)
    chain = chains.rag_fusion_chain(fan_out, llm, n=2, return_sources=True)
    try:
        with pytest.warns(UserWarning, match="'hung' failed"):
            result = chain.invoke("question")
    finally:
        hung.release.set()
    assert result["answer"] == "the answer"
    assert result["documents"] and all(d.page_content.startswith("a:") for d in result["documents"])


def test_calls_reuse_the_retrieval_threads_and_a_hung_call_does_not_hold_them() -> None:
    names: set[str] = set()
    record = RunnableLambda(lambda query: names.add(threading.current_thread().name) or [])
    MultiRetriever([record]).invoke("warm-up")
    alive = {thread.name for thread in threading.enumerate()}
    for _ in range(20):
        MultiRetriever([record]).invoke("again")
    assert names <= alive  # threads that were there already served every call: none started
    fan_out = MultiRetriever([TagRetriever(tag="a"), TagRetriever(tag="b")])
    hung = HungRetriever(name="hung")
    try:
        with pytest.warns(UserWarning, match="'hung' failed"):
            MultiRetriever([hung, TagRetriever(tag="a")], timeout=0.2).invoke("q")
        # later calls, gated to one at a time, still answer while the hung call holds its thread
        started = time.perf_counter()
        results = fan_out.invoke(["x", "y"], {"max_concurrency": 1})
        assert contents(results) == [["a:x:0", "a:x:1"], ["b:x:0", "b:x:1"]] + [
            ["a:y:0", "a:y:1"],
            ["b:y:0", "b:y:1"],
        ]
        assert time.perf_counter() - started < 5
    finally:
        hung.release.set()


async def test_hung_sync_retrievers_do_not_starve_later_async_calls() -> None:
    # A sync retriever's async call runs in the event loop's default executor. Each call past its
    # time bound kept a thread there; once all were taken, the next calls' retrievers timed out
    # unrun and a sync handler's on_retriever_error waited for a hung call to end (27 s seen).
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(2))  # fills at once
    hung = HungRetriever(name="hung")
    fan_out = MultiRetriever([hung, TagRetriever(tag="a", count=1)], timeout=0.2)
    handled = {"callbacks": [BaseCallbackHandler()]}
    try:
        for _ in range(4):
            with pytest.warns(UserWarning, match="'hung' failed"):
                found = await asyncio.wait_for(fan_out.ainvoke("q", handled), 5)
            assert contents(found) == [["a:q:0"]]
    finally:
        hung.release.set()


async def test_only_a_late_call_holding_a_thread_replaces_the_loops_executor() -> None:
    """Only a call that waits on an executor thread keeps it once cut at its bound; a retriever's
    own coroutine is just cancelled. Every late call replaced the loop's default executor."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(2, thread_name_prefix="own"))

    async def executor_thread() -> str:
        return await loop.run_in_executor(None, lambda: threading.current_thread().name)

    class AsyncHung(BaseRetriever):
        async def _aget_relevant_documents(self, query: str, **kwargs: Any) -> list[Document]:
            await asyncio.Event().wait()  # only the cancel at the time bound ends it
            return []

        def _get_relevant_documents(self, query: str, **kwargs: Any) -> list[Document]:
            raise AssertionError("the async call has code of its own")

    async def never(query: str) -> list[Document]:
        await asyncio.Event().wait()
        return []

    native = [AsyncHung(name="hung"), RunnableLambda(lambda q: [], afunc=never, name="hung")]
    for late in native:
        fan_out = MultiRetriever([late, TagRetriever(tag="a", count=1)], timeout=0.2)
        with pytest.warns(UserWarning, match="'hung' failed"):
            assert contents(await fan_out.ainvoke("q")) == [["a:q:0"]]
        assert (await executor_thread()).startswith("own")  # the user's executor, kept
    hung = HungRetriever(name="hung")
    try:
        fan_out = MultiRetriever([hung, TagRetriever(tag="a", count=1)], timeout=0.2)
        with pytest.warns(UserWarning, match="'hung' failed"):
            await fan_out.ainvoke("q")
        assert not (await executor_thread()).startswith("own")  # a fresh one: a thread is held
    finally:
        hung.release.set()


def test_unknown_fields_are_refused_with_the_right_name() -> None:
    with pytest.raises(TypeError, match="unknown field 'llm': use FusionRetriever.from_llm"):
        FusionRetriever(retrievers=[TagRetriever(tag="a")], llm=FakeListChatModel(responses=[]))
    with pytest.raises(TypeError, match="unknown field 'kk': did you mean 'k'"):
        FusionRetriever(retrievers=[TagRetriever(tag="a")], kk=3)
    with pytest.raises(TypeError, match="unknown field 'top': did you mean 'top_n'"):
        ReciprocalRankFusion(top=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError) as refused:  # no close name: no empty hint after a colon
        FusionRetriever(retrievers=[TagRetriever(tag="a")], zzz=3)
    assert str(refused.value).startswith("FusionRetriever got an unknown field 'zzz' (fields: ")


@pytest.mark.parametrize("value", [True, "5", 2.0])
def test_counts_and_bounds_are_not_coerced(value: object) -> None:
    """README: k takes a positive int only; True was silently k=1, "5" was 5 (and timeout=True 1 s)."""
    with pytest.raises(ValueError, match="k"):
        FusionRetriever(retrievers=[TagRetriever(tag="a")], k=value)
    with pytest.raises(ValueError, match="top_n"):
        ReciprocalRankFusion(top_n=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_n"):
        reciprocal_rank_fusion.invoke([[Document("a")]], top_n=value)
    if not isinstance(value, float):
        with pytest.raises(ValueError, match="rank_constant"):
            ReciprocalRankFusion(rank_constant=value)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout"):
            MultiRetriever([TagRetriever(tag="a")], timeout=value)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_process_gets_retrieval_threads_of_its_own() -> None:
    """A forked child inherits the parent's idle-thread count but none of its threads."""
    fan_out = MultiRetriever([TagRetriever(tag="a")], timeout=2)
    in_background(fan_out.invoke, "parent").result()  # the parent's shared threads exist now
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            early = in_background(fan_out.invoke, "child").result(timeout=2)
            answered = (
                contents(early) == contents(fan_out.invoke("child")) == [["a:child:0", "a:child:1"]]
            )
        except BaseException:
            answered = False
        os._exit(0 if answered else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_run_name_given_to_the_fan_out_names_its_run_not_its_retrievers_runs() -> None:
    """lcuser31: with no handler in the call's config, ``run_name`` reached the retrievers, so a
    retriever with callbacks of its own recorded its run as "search", as LangChain never does."""
    collector = RunCollector()
    watched = TagRetriever(tag="a").with_config(callbacks=[collector])
    MultiRetriever([watched]).invoke(["x"], {"run_name": "search"})
    assert [run.name for run in collector.roots] == ["TagRetriever"]


@pytest.mark.parametrize("strategy", ["hyde", "rewrite"])
def test_from_llm_refuses_n_for_a_strategy_that_writes_one_query(strategy: str) -> None:
    """lcuser31: ``n=2`` with hyde was "TypeError: hyde() takes 1 positional argument but 2 were
    given", which names no n; now the query step refuses the keyword n by name."""
    llm = FakeListChatModel(responses=["b"])
    with pytest.raises(TypeError, match=f"{strategy}\\(\\) got an unexpected keyword argument 'n'"):
        FusionRetriever.from_llm([TagRetriever(tag="a")], llm, strategy=strategy, n=2)
