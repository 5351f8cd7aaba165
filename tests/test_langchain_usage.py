"""A LangChain user's habits over the kit's public API (lcuser33): their own community retrievers
and vector stores, wrapped as LangChain wraps runnables (``with_config``, ``with_retry``,
``configurable_fields``), batched with ``max_concurrency``, and served with LangServe's own
``add_routes`` (in process, ``TestClient``: no socket). Each test's docstring says the defect it
pinned before the fix.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import ConfigurableField, Runnable, RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore

from rag_fusion_chain import MultiRetriever, fusion, queries, rag_fusion_chain
from tests.test_fanout import Probe
from tests.test_interop import PASSAGES, WordEmbeddings, splits

QUESTION = "How do heat pumps work in winter?"
OWN_K = 3  # what the user's retrievers return unless asked for more


def community_bm25() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community's sunset notice
        from langchain_community.retrievers import BM25Retriever

    return BM25Retriever.from_documents(splits(), k=OWN_K)


def in_memory() -> BaseRetriever:
    store = InMemoryVectorStore.from_documents(splits(), WordEmbeddings())
    return store.as_retriever(search_kwargs={"k": OWN_K})


def chat_model() -> GenericFakeChatModel:
    """Streams its one reply word by word, every time it is asked (queries, then the answer)."""
    reply = AIMessage("heat pump winter efficiency\nair source heat pumps cold")
    return GenericFakeChatModel(messages=itertools.repeat(reply))


def broken(query: str) -> list[Document]:
    raise RuntimeError("index offline")


@contextmanager
def served(routes: dict[str, Runnable[Any, Any]]) -> Iterator[Any]:
    """The routes on one FastAPI app with LangServe's ``add_routes``, as a user mounts them."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from langserve import add_routes
    from sse_starlette.sse import AppStatus

    AppStatus.should_exit_event = None  # sse-starlette keeps it from an earlier client's loop
    app = FastAPI()
    for path, chain in routes.items():
        add_routes(app, chain, path=path)
    with TestClient(app, base_url="http://127.0.0.1:8000", raise_server_exceptions=False) as http:
        yield http


# ---------------------------------------------------------------- LangServe


def test_a_served_sources_chain_still_answers_when_a_retriever_fails() -> None:
    """``RetrievalFailure.exception`` is a dataclass field holding the exception, which LangServe's
    orjson serializer cannot write: ``/invoke`` and ``/batch`` answered 500 and ``/stream`` ended
    in an error event exactly when a retriever failed. Fix: the field named ``_exception`` (orjson
    skips underscore fields) behind an ``exception`` property."""
    failing = RunnableLambda(broken, name="broken")
    chain = rag_fusion_chain([community_bm25(), failing], chat_model(), n=2, return_sources=True)
    with served({"/sources": chain}) as http, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "retriever 'broken' failed ..."
        response = http.post("/sources/invoke", json={"input": {"question": QUESTION}})
        streamed = http.post("/sources/stream", json={"input": {"question": QUESTION}}).text
    assert response.status_code == 200
    output = response.json()["output"]
    assert output["documents"]
    assert {failure["source"] for failure in output["failures"]} == {"broken"}
    assert all(failure.keys() == {"source", "query", "error"} for failure in output["failures"])
    assert "event: error" not in streamed and "event: end" in streamed


@pytest.mark.parametrize("endpoint", ["stream_log", "stream_events"])
def test_the_playgrounds_streams_of_a_served_chain_end_without_an_error(endpoint: str) -> None:
    """The state ``generate_queries`` hands on holds ``first``, a ``_Begun`` (the question's
    search: a Future or Task) that LangServe cannot serialize, so the playground's
    ``/stream_log`` and ``/stream_events`` ended in a 500 error event after the query step. Fix:
    ``_Begun`` a pydantic model whose ``search`` is ``Field(exclude=True, repr=False)``
    (LangServe dumps it as ``{}``), or the search carried outside the state."""
    chain = rag_fusion_chain([community_bm25(), in_memory()], chat_model(), n=2)
    with served({"/rag-fusion": chain}) as http:
        response = http.post(f"/rag-fusion/{endpoint}", json={"input": {"question": QUESTION}})
    assert response.status_code == 200
    assert "event: error" not in response.text and "event: end" in response.text


def test_two_ready_chains_served_side_by_side_each_answer() -> None:
    """Every ready chain is named ``RunnableSequence`` (its binding's sequence), so its schemas are
    ``RunnableSequenceInput`` / ``Output`` whatever it returns; LangServe keys its models by that
    name, so of two chains on one app the second checked its output against the first's model and
    answered 500. Fix: name the sequence after the strategy (``-sources`` with return_sources,
    ``-retrieval`` in retrieval_chain; with_step keeps it), as serving.build_chain names its own."""
    parts = [community_bm25(), in_memory()]
    answer = rag_fusion_chain(parts, chat_model(), n=2)
    sources = rag_fusion_chain(parts, chat_model(), n=2, return_sources=True)
    with served({"/answer": answer, "/sources": sources}) as http:
        answered = http.post("/answer/invoke", json={"input": {"question": QUESTION}})
        sourced = http.post("/sources/invoke", json={"input": {"question": QUESTION}})
    assert answered.status_code == 200 and isinstance(answered.json()["output"], str)
    assert sourced.status_code == 200 and sourced.json()["output"]["documents"]


# ---------------------------------------------------------------- max_concurrency


QUESTIONS = [QUESTION, "solar electricity at night", "underground heat"]


class Searches:
    """The questions whose search has begun, so that a model can wait for its question's: then
    a search begun beside the query step is surely running when the queries come."""

    def __init__(self) -> None:
        self.begun: set[str] = set()
        self.changed = threading.Condition()

    def begin(self, query: str) -> None:
        with self.changed:
            self.begun.add(query)
            self.changed.notify_all()

    def model(self) -> Runnable[Any, AIMessage]:
        """Writes two queries once the prompt's question is being searched (or after 0.3 s)."""

        def reply(prompt: Any) -> AIMessage:
            text = prompt.to_string()
            with self.changed:
                self.changed.wait_for(lambda: any(q in text for q in self.begun), timeout=0.3)
            return AIMessage("heat pump winter efficiency\nair source heat pumps cold")

        return RunnableLambda(reply)


class ProbedRetriever(BaseRetriever):
    """Returns the query as a document; a question's search is slow, so that a second search
    begun meanwhile overlaps it (the ``probe`` counts overlapping calls)."""

    probe: Any
    searches: Any = None

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        with self.probe:
            if self.searches is not None and query in QUESTIONS:
                self.searches.begin(query)
                time.sleep(0.2)  # the window in which another question's search would overlap
        return [Document(query)]


@pytest.mark.parametrize("call", ["batch", "abatch"])
def test_max_concurrency_one_runs_one_retriever_call_at_a_time_as_plain_lcel(call: str) -> None:
    """``generate_queries`` began the question's search in the background (``in_background`` /
    ``ensure_future``) for every input of a batch, outside ``max_concurrency``: with 1, the
    questions' searches overlapped where ``generator | retriever.map() | fusion`` runs one call
    at a time. Fix: with ``max_concurrency`` set, no search begun beside the query step
    (``first`` None: the question is searched in retrieve's one batch)."""
    config = {"max_concurrency": 1}
    plain_probe, chain_probe, searches = Probe(), Probe(), Searches()
    plain = queries.rag_fusion(chat_model(), n=2) | ProbedRetriever(probe=plain_probe).map()
    retriever = ProbedRetriever(probe=chain_probe, searches=searches)
    chain = rag_fusion_chain(retriever, searches.model(), n=2)
    for runnable in (plain | fusion.reciprocal_rank_fusion, chain):
        if call == "batch":
            runnable.batch(QUESTIONS, config)
        else:
            asyncio.run(runnable.abatch(QUESTIONS, config))
    assert plain_probe.peak == 1
    assert chain_probe.peak == 1


# ---------------------------------------------------------------- k through LangChain's wrappers


WRAPPED = {
    "bm25.with_config": lambda: community_bm25().with_config(run_name="keywords"),
    "in_memory.with_retry": lambda: in_memory().with_retry(stop_after_attempt=2),
    "bm25.configurable_fields": lambda: community_bm25().configurable_fields(
        k=ConfigurableField(id="bm25_k")
    ),
}


@pytest.mark.parametrize("wrapped", WRAPPED)
def test_k_reaches_a_retriever_wrapped_as_langchain_wraps_runnables(wrapped: str) -> None:
    """``k`` was silently lost for a wrapped retriever (no error, no warning: the list stayed at
    the retriever's own k): ``_unbound`` unwraps ``RunnableBinding`` but not ``RunnableRetry``
    (a ``RunnableBindingBase``), the ``k`` field of a retriever that takes no keyword (community
    BM25) was set only when unwrapped, and a ``configurable_fields`` retriever was not looked
    into. Fix: unwrap ``RunnableBindingBase`` and a ``DynamicRunnable``'s default, ask the
    innermost retriever (keyword or field) and rewrap with ``model_copy``."""
    asked = len(PASSAGES) - 2  # more than the retriever's own k, fewer than the passages
    assert asked > OWN_K
    (unwrapped,) = MultiRetriever([community_bm25()]).invoke([QUESTION], k=asked)
    assert len(unwrapped) == asked
    (found,) = MultiRetriever([WRAPPED[wrapped]()]).invoke([QUESTION], k=asked)
    assert len(found) == asked


def test_a_configurable_retriever_is_named_after_the_retriever_it_configures() -> None:
    """A ranked list's (and a failure's) source is ``get_name()``, which for a
    ``configurable_fields`` / ``configurable_alternatives`` retriever is LangChain's wrapper
    class, ``RunnableConfigurableFields`` / ``RunnableConfigurableAlternatives``, in warnings,
    failures and ``rag-fusion ask --verbose`` alike. Fix: a ``DynamicRunnable`` named after its
    default, as a binding already is after its bound."""
    alternatives = community_bm25().configurable_alternatives(
        ConfigurableField(id="retriever"), default_key="bm25", vectors=in_memory()
    )
    fields = community_bm25().configurable_fields(k=ConfigurableField(id="bm25_k"))
    lists = MultiRetriever([alternatives, fields]).invoke(QUESTION)
    assert [ranked.source for ranked in lists] == ["BM25Retriever[0]", "BM25Retriever[1]"]
