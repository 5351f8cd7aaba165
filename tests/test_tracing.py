"""LangSmith traces of the chains, as the langsmith SDK sends them (to a local recorder).

The SDK is pointed at :class:`tests.langsmith_recorder.LangSmithRecorder` through an explicit
``Client(api_url=..., api_key=...)`` in a ``LangChainTracer`` (the environment says the same, so
a stray tracer would land there too), the tracer's futures and the client are flushed, and the
recorded run tree is checked: names, parents, tags, metadata, and the outputs a reader needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import FakeListChatModel
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable
from langchain_core.tracers.langchain import LangChainTracer
from langchain_core.vectorstores import InMemoryVectorStore
from langsmith import Client
from langsmith import utils as langsmith_utils

from rag_fusion_chain import chains, models
from tests.conftest import STUB_API_KEY
from tests.langsmith_recorder import INGEST_MODES, LangSmithRecorder, Run
from tests.stub_openai import StubOpenAI

PROJECT = "rag-fusion-chain-tests"
LANGSMITH_KEY = "lsv2-fake-recorder-key"
QUESTION = "How do heat pumps keep a house warm in winter?"
QUERIES = ["heat pump winter performance", "air source heat pump cold climate", "heat pump COP"]
ANSWER = "They move heat from the outside air into the house [1]."
SEARCHED = [QUESTION, *QUERIES]
"""The ready chains search the question itself first, then the generated queries."""
STEPS = ("generate_queries", "retrieve", "fuse", "format_context", "answer")
"""The named steps of a query-fusion chain, in the order they run."""
N, K, TOP_N = 3, 2, 4


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def tracer(
    langsmith_recorder: LangSmithRecorder, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LangChainTracer]:
    """A tracer whose client sends to the recorder; flushed (futures, then client) on teardown."""
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", langsmith_recorder.url)
    monkeypatch.setenv("LANGSMITH_API_KEY", LANGSMITH_KEY)
    monkeypatch.setenv("LANGSMITH_PROJECT", PROJECT)
    langsmith_utils.get_env_var.cache_clear()  # langsmith caches what it read: read these
    client = Client(api_url=langsmith_recorder.url, api_key=LANGSMITH_KEY)
    tracer = LangChainTracer(client=client, project_name=PROJECT)
    yield tracer
    flush(tracer)
    monkeypatch.undo()
    langsmith_utils.get_env_var.cache_clear()  # else later tests trace to api.smith.langchain.com


def flush(tracer: LangChainTracer) -> None:
    """Wait until every run the tracer saw has been sent."""
    tracer.wait_for_futures()
    tracer.client.flush()


def heat_pump_retriever() -> BaseRetriever:
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_documents(
        [
            Document(f"Heat pump note {number}.", id=f"note-{number}", metadata={"source": "notes"})
            for number in range(8)
        ]
    )
    return store.as_retriever(search_kwargs={"k": K})


def fake_llm() -> FakeListChatModel:
    """Answers the query-generation prompt, then the answer prompt."""
    return FakeListChatModel(responses=["\n".join(QUERIES), ANSWER])


def rag_fusion(llm: Runnable[Any, Any]) -> Runnable[Any, Any]:
    return chains.rag_fusion_chain(
        heat_pump_retriever(), llm, n=N, k=K, top_n=TOP_N, return_sources=True
    )


def roots(runs: dict[str, Run]) -> list[Run]:
    return [run for run in runs.values() if not run.get("parent_run_id")]


def single(runs: dict[str, Run], name: str) -> Run:
    named = [run for run in runs.values() if run.get("name") == name]
    assert len(named) == 1, f"expected one run named {name!r}, found {len(named)}"
    return named[0]


def ancestors(runs: dict[str, Run], run: Run) -> list[Run]:
    """The run's parents, nearest first."""
    chain = []
    while run.get("parent_run_id"):
        run = runs[run["parent_run_id"]]
        chain.append(run)
    return chain


def metadata_of(run: Run) -> dict[str, Any]:
    return (run.get("extra") or {}).get("metadata") or {}


# ---------------------------------------------------------------- the run tree


@pytest.mark.parametrize("langsmith_recorder", INGEST_MODES, indirect=True)
def test_rag_fusion_trace_is_a_clean_named_tree(
    tracer: LangChainTracer, langsmith_recorder: LangSmithRecorder
) -> None:
    result = rag_fusion(fake_llm()).invoke(QUESTION, config={"callbacks": [tracer]})
    flush(tracer)
    runs = langsmith_recorder.runs

    (root,) = roots(runs)
    assert root["name"] == "rag-fusion"
    assert root["run_type"] == "chain"
    assert "rag-fusion" in root["tags"]
    metadata = metadata_of(root)
    assert {key: metadata.get(key) for key in ("strategy", "n", "k", "top_n")} == {
        "strategy": "rag-fusion",
        "n": N,
        "k": K,
        "top_n": TOP_N,
    }
    assert root["session_name"] == PROJECT
    assert root["inputs"] == {"input": QUESTION}
    assert root["outputs"]["answer"] == ANSWER
    assert all(run["trace_id"] == root["id"] for run in runs.values())
    assert all(run.get("end_time") and not run.get("error") for run in runs.values())

    steps = {name: single(runs, name) for name in STEPS}
    for step in steps.values():
        assert step["parent_run_id"] == root["id"], f"{step['name']} is not a child of the root"
        assert "rag-fusion" in step["tags"]
        assert metadata_of(step)["n"] == N
    started = [steps[name]["dotted_order"] for name in STEPS]
    assert started == sorted(started), "the steps did not run in order"

    assert steps["generate_queries"]["outputs"]["queries"] == SEARCHED
    retrievals = [run for run in runs.values() if run["run_type"] == "retriever"]
    assert sorted(run["inputs"]["query"] for run in retrievals) == sorted(SEARCHED)
    assert all(len(run["outputs"]["documents"]) == K for run in retrievals)

    fused = steps["fuse"]["outputs"]["documents"]
    assert [document["id"] for document in fused] == [d.id for d in result["documents"]]
    assert len(fused) <= TOP_N
    assert all("fusion_score" in document["metadata"] for document in fused)
    assert all(document["page_content"].startswith("Heat pump note") for document in fused)
    assert '<passage id="1"' in steps["format_context"]["outputs"]["context"]
    assert steps["answer"]["outputs"]["answer"] == ANSWER


def test_streaming_records_one_tree_with_the_whole_answer(
    tracer: LangChainTracer, langsmith_recorder: LangSmithRecorder
) -> None:
    chain = chains.rag_fusion_chain(heat_pump_retriever(), fake_llm(), n=N, k=K, top_n=TOP_N)
    streamed = "".join(chain.stream(QUESTION, config={"callbacks": [tracer]}))
    flush(tracer)
    runs = langsmith_recorder.runs

    (root,) = roots(runs)
    assert streamed == ANSWER
    assert root["name"] == "rag-fusion"
    assert root["outputs"] == {"output": ANSWER}
    assert single(runs, "answer")["outputs"] == {"output": ANSWER}
    assert single(runs, "generate_queries")["outputs"]["queries"] == SEARCHED


def test_runs_sent_one_at_a_time_are_recorded_too(
    langsmith_recorder: LangSmithRecorder,
) -> None:
    """Without background batching the SDK posts each run to /runs and patches /runs/<id>."""
    client = Client(api_url=langsmith_recorder.url, api_key=LANGSMITH_KEY, auto_batch_tracing=False)
    tracer = LangChainTracer(client=client, project_name=PROJECT)
    rag_fusion(fake_llm()).invoke(QUESTION, config={"callbacks": [tracer]})
    flush(tracer)
    runs = langsmith_recorder.runs

    sent = [(request.method, request.path) for request in langsmith_recorder.requests]
    assert ("POST", "/runs") in sent
    assert any(method == "PATCH" and path.startswith("/runs/") for method, path in sent)
    (root,) = roots(runs)
    assert root["name"] == "rag-fusion"
    assert all(single(runs, name)["parent_run_id"] == root["id"] for name in STEPS)
    assert single(runs, "generate_queries")["outputs"]["queries"] == SEARCHED


# ---------------------------------------------------------------- secrets


def test_the_chat_model_api_key_never_reaches_traces(
    tracer: LangChainTracer, langsmith_recorder: LangSmithRecorder, openai_env: StubOpenAI
) -> None:
    openai_env.script(["\n".join(QUERIES), ANSWER, "\n".join(QUERIES), ANSWER])
    llm = models.chat_model()
    chain = rag_fusion(llm)

    chain.invoke(QUESTION, config={"callbacks": [tracer]})
    list(chain.stream(QUESTION, config={"callbacks": [tracer]}))
    flush(tracer)

    authorizations = {request.headers.get("authorization") for request in openai_env.requests}
    assert authorizations == {f"Bearer {STUB_API_KEY}"}, "the key was not actually in use"
    chat_runs = [run for run in langsmith_recorder.runs.values() if run["run_type"] == "llm"]
    assert len(chat_runs) == 4
    recorded = (
        langsmith_recorder.payload()
        + repr([request.headers for request in langsmith_recorder.requests]).encode()
    )
    assert STUB_API_KEY.encode() not in recorded


# ---------------------------------------------------------------- a readable tree


def depth(runs: dict[str, Run], run: Run) -> int:
    return len(ancestors(runs, run))


def test_a_question_with_three_queries_makes_at_most_thirty_runs(
    tracer: LangChainTracer, langsmith_recorder: LangSmithRecorder
) -> None:
    """Root, the five steps, and inside them only the model calls and the retriever runs."""
    chain = chains.rag_fusion_chain(heat_pump_retriever(), fake_llm(), n=N, k=K, top_n=TOP_N)
    chain.invoke(QUESTION, config={"callbacks": [tracer]})
    flush(tracer)
    runs = langsmith_recorder.runs
    print(f"\nruns for one question with {N} queries over one retriever: {len(runs)}")
    assert len(runs) <= 30, sorted(str(run["name"]) for run in runs.values())
    retrievals = [run for run in runs.values() if run["run_type"] == "retriever"]
    assert len(retrievals) == len(SEARCHED)  # one run per query searched, no wrappers


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(
            lambda llm: chains.rag_fusion_chain(heat_pump_retriever(), llm), id="rag-fusion"
        ),
        pytest.param(lambda llm: chains.hyde_chain(heat_pump_retriever(), llm), id="hyde"),
        pytest.param(
            lambda llm: chains.step_back_chain(heat_pump_retriever(), llm), id="step-back"
        ),
        pytest.param(
            lambda llm: chains.decomposition_chain(heat_pump_retriever(), llm, n=2),
            id="decomposition",
        ),
    ],
)
def test_named_steps_sit_right_under_the_root_or_under_another_named_step(
    tracer: LangChainTracer, langsmith_recorder: LangSmithRecorder, build: Any
) -> None:
    llm = FakeListChatModel(responses=["\n".join(QUERIES[:2]), ANSWER, ANSWER, ANSWER, ANSWER])
    build(llm).invoke(QUESTION, config={"callbacks": [tracer]})
    flush(tracer)
    runs = langsmith_recorder.runs
    (root,) = roots(runs)
    named_steps = [run for run in runs.values() if run["name"] in STEPS]
    assert {run["name"] for run in named_steps} == set(STEPS)
    for run in named_steps:
        parent = runs[run["parent_run_id"]]
        assert parent is root or (depth(runs, run) == 2 and parent["name"] in STEPS), (
            f"{run['name']} sits under {parent['name']} at depth {depth(runs, run)}"
        )
    assert {run["name"] for run in runs.values() if run.get("parent_run_id") == root["id"]} >= set(
        STEPS
    )
