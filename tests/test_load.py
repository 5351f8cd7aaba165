"""Load: 200 questions through ``abatch`` and through a LangServe route, with the real ChatOpenAI.

Both paths run a RAG-Fusion chain whose chat model is ``langchain_openai.ChatOpenAI`` (from
:func:`rag_fusion_chain.models.chat_model`) talking to the stub OpenAI server, and whose retriever
records how many calls, and how many distinct questions, are in flight at once. The checks:

* concurrency stays within the bound: ``abatch(max_concurrency=M)`` keeps at most ``M`` questions
  (and so at most ``M`` model requests) in flight. Retriever *calls* may reach ``M`` times the
  queries of one question: LangChain hands ``max_concurrency`` down to nested batches, and the
  fan-out of each question is bounded by it again (``M x min(M, queries x retrievers)``);
* nothing leaks: after the run, the thread count and the process's open sockets (``/proc/self/fd``)
  return to their baseline within a grace period;
* every answer comes back, non-empty, and belongs to its question (the stub writes each answer
  from the prompt it receives, counting the passages that mention the question).

The HTTP clients of the chat model are created and closed by the test, as an application would:
langchain-openai's cached default clients outlive event loops by design, which is not the kit's
leak to find. Timing is reported by ``benchmarks/bench_load.py``, never asserted here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable
from pydantic import ConfigDict, PrivateAttr

from rag_fusion_chain import chains, models
from tests.stub_openai import Message, StubOpenAI

pytest.importorskip("langchain_openai")
pytestmark = pytest.mark.filterwarnings(
    # langserve 0.3 reads model_fields from instances, once per request
    "ignore:Accessing the 'model_fields' attribute on the instance:DeprecationWarning"
)

QUESTION_COUNT = 200
MAX_CONCURRENCY = 8
"""``max_concurrency`` of the abatch path."""
CLIENT_CONCURRENCY = 16
"""Requests the LangServe client keeps in flight."""
QUERIES_PER_QUESTION = 4
SEARCHES_PER_QUESTION = QUERIES_PER_QUESTION + 1
"""The generated queries and the question itself, which a ready chain searches too."""
PASSAGES_PER_QUERY = 2
TOP_N = 5
MODEL_DELAY = 0.005
"""Seconds the stub model "thinks" per request."""
RETRIEVER_DELAY = 0.003
"""Seconds each retriever call takes."""
GRACE_SECONDS = 10.0
"""How long threads and sockets get to wind down after a run."""
STUB_API_KEY = "sk-load-test"


# --------------------------------------------------------------------------------------------
# Concurrency probes
# --------------------------------------------------------------------------------------------


class Probe:
    """Counts what is in flight at the same moment, across threads and tasks; keeps the peak."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.total = 0

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """Count the enclosed block as in flight."""
        with self._lock:
            self.active += 1
            self.total += 1
            self.peak = max(self.peak, self.active)
        try:
            yield
        finally:
            with self._lock:
                self.active -= 1


class QuestionProbe:
    """Counts distinct questions in flight (several calls for one question count once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: Counter[str] = Counter()
        self.peak = 0

    @contextlib.contextmanager
    def inside(self, question: str) -> Iterator[None]:
        """Count ``question`` as in flight during the enclosed block."""
        with self._lock:
            self._active[question] += 1
            self.peak = max(self.peak, len(self._active))
        try:
            yield
        finally:
            with self._lock:
                self._active[question] -= 1
                if not self._active[question]:
                    del self._active[question]


def question_tag(question: str) -> str:
    """A short tag standing for ``question`` in queries, passages and answers.

    Replies stay a few words long: the stub streams one chunk per word, and under load every
    chunk costs a thread switch in this one process.
    """
    return "t" + hashlib.blake2b(question.encode(), digest_size=6).hexdigest()


def tag_of_query(query: str) -> str:
    """The question tag of a retriever query or a passage: a generated query starts with it (the
    stub writes ``<tag> angle-<i>``); the question itself, searched too, is tagged here."""
    first = query.split()[0]
    return first if re.fullmatch(r"t[0-9a-f]{12}", first) else question_tag(query)


class ProbeRetriever(BaseRetriever):
    """Returns two passages per query naming the query; records the peak of concurrent calls.

    Both paths are native: ``_aget_relevant_documents`` sleeps with ``asyncio.sleep`` so that
    async callers overlap on one event loop, the sync path with ``time.sleep``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    delay: float = RETRIEVER_DELAY
    _calls: Probe = PrivateAttr(default_factory=Probe)
    _questions: QuestionProbe = PrivateAttr(default_factory=QuestionProbe)

    @property
    def calls(self) -> Probe:
        """Concurrent retriever calls."""
        return self._calls

    @property
    def questions(self) -> QuestionProbe:
        """Concurrent distinct questions being retrieved for."""
        return self._questions

    @staticmethod
    def passages(query: str) -> list[Document]:
        return [
            Document(f"{tag_of_query(query)} {query} / passage {number}", id=f"{query}#{number}")
            for number in range(PASSAGES_PER_QUERY)
        ]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        with self._questions.inside(tag_of_query(query)), self._calls.inside():
            time.sleep(self.delay)
        return self.passages(query)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        with self._questions.inside(tag_of_query(query)), self._calls.inside():
            await asyncio.sleep(self.delay)
        return self.passages(query)


# --------------------------------------------------------------------------------------------
# The stub model's behaviour
# --------------------------------------------------------------------------------------------

_QUESTION_LINE = re.compile(r"^Question: (?P<question>.+)$", re.MULTILINE)
_PASSAGE_BODY = re.compile(r"<passage [^>]*>\n(.*?)\n</passage>", re.DOTALL)


def make_question(number: int) -> str:
    """The ``number``-th question of the load: distinct, and in a mix of scripts."""
    topics = ("heat pumps", "光伏发电", "solar panels 🌞", "אנרגיית רוח", "grid storage")
    return f"How do {topics[number % len(topics)]} behave in case {number}?"


def expected_answer(question: str) -> str:
    """What the stub answers for ``question`` when every quoted passage belongs to it."""
    return f"{question_tag(question)}: {TOP_N}/{TOP_N}"


class StubModel:
    """The stub's reply function: queries for a query prompt, an answer for an answer prompt.

    The answer names the question by its tag and counts how many quoted passages belong to it:
    a passage of another question (crossed wires under load) changes the answer. ``probe`` sees each request's
    "thinking" time, so its peak is the number of concurrent model requests.
    """

    def __init__(self, delay: float = MODEL_DELAY) -> None:
        self.delay = delay
        self.probe = Probe()

    def __call__(self, messages: list[Message]) -> str:
        with self.probe.inside():
            time.sleep(self.delay)
        prompt = str(messages[-1].get("content") or "")
        match = _QUESTION_LINE.search(prompt)
        if match is None:
            return ""
        tag = question_tag(match.group("question").strip())
        if "Passages:" in prompt:
            passages = _PASSAGE_BODY.findall(prompt)
            belonging = sum(tag_of_query(body) == tag for body in passages)
            return f"{tag}: {belonging}/{len(passages)}"
        return "\n".join(f"{tag} angle-{number}" for number in range(QUERIES_PER_QUESTION))


def load_chain(
    stub: StubOpenAI, retriever: BaseRetriever, http_async_client: Any
) -> Runnable[Any, str]:
    """The RAG-Fusion chain under load: real ChatOpenAI (no retries) on the stub, one retriever."""
    llm = models.chat_model(
        "stub-chat",
        base_url=stub.base_url,
        api_key=STUB_API_KEY,
        max_retries=0,
        timeout=30,
        http_async_client=http_async_client,
    )
    return chains.rag_fusion_chain(retriever, llm, n=QUERIES_PER_QUESTION, top_n=TOP_N)


def async_http_client() -> Any:
    """A fresh async HTTP client of the kind the OpenAI SDK uses (closed by its owner)."""
    import openai

    return openai.DefaultAsyncHttpxClient()


# --------------------------------------------------------------------------------------------
# Resources: threads and sockets
# --------------------------------------------------------------------------------------------


def open_sockets() -> int:
    """Sockets this process holds open, counted from ``/proc/self/fd``."""
    count = 0
    for descriptor in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # a descriptor closed while we looked
            if os.readlink(f"/proc/self/fd/{descriptor}").startswith("socket:"):
                count += 1
    return count


@dataclass
class Resources:
    """Threads and open sockets at one moment."""

    threads: int
    sockets: int

    @classmethod
    def now(cls) -> Resources:
        return cls(threading.active_count(), open_sockets())

    def settled_within(self, baseline: Resources, slack_sockets: int, grace: float) -> Resources:
        """Poll until threads and sockets are back to ``baseline`` (sockets within slack)."""
        deadline = time.monotonic() + grace
        current = Resources.now()
        while time.monotonic() < deadline:
            current = Resources.now()
            if (
                current.threads <= baseline.threads
                and current.sockets <= baseline.sockets + slack_sockets
            ):
                break
            time.sleep(0.05)
        return current


# --------------------------------------------------------------------------------------------
# The two paths
# --------------------------------------------------------------------------------------------


@dataclass
class LoadRun:
    """What one load run observed."""

    questions: list[str]
    answers: list[Any]
    latencies: list[float] = field(default_factory=list)
    """Seconds per question, from its start to its answer (queueing excluded)."""
    wall_seconds: float = 0.0


class LatencyRecorder:
    """Root-run start/end times from callbacks: per-question latency inside ``abatch``."""

    def __init__(self) -> None:
        from langchain_core.callbacks import BaseCallbackHandler

        recorder = self
        self.started: dict[Any, float] = {}
        self.latencies: list[float] = []

        class Handler(BaseCallbackHandler):
            run_inline = True  # called on the event loop, not handed to a thread pool

            def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
                if kwargs.get("parent_run_id") is None:
                    recorder.started[kwargs["run_id"]] = time.perf_counter()

            def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
                started = recorder.started.pop(kwargs["run_id"], None)
                if started is not None:
                    recorder.latencies.append(time.perf_counter() - started)

        self.handler = Handler()


async def run_abatch(
    stub: StubOpenAI,
    retriever: BaseRetriever,
    questions: Sequence[str],
    max_concurrency: int = MAX_CONCURRENCY,
) -> LoadRun:
    """Answer ``questions`` with one ``abatch`` call; the HTTP client lives and dies here."""
    client = async_http_client()
    recorder = LatencyRecorder()
    try:
        chain = load_chain(stub, retriever, client)
        started = time.perf_counter()
        answers = await chain.abatch(
            [{"question": question} for question in questions],
            config={"max_concurrency": max_concurrency, "callbacks": [recorder.handler]},
        )
        wall = time.perf_counter() - started
    finally:
        await client.aclose()
    return LoadRun(list(questions), answers, recorder.latencies, wall)


@contextlib.contextmanager
def langserve_server(stub: StubOpenAI, retriever: BaseRetriever) -> Iterator[str]:
    """Serve the load chain with LangServe on 127.0.0.1 (uvicorn, in a thread); yield its URL.

    The chat model's HTTP client is closed in the app's lifespan, on the server's own loop.
    """
    import uvicorn
    from fastapi import FastAPI
    from langserve import add_routes

    from rag_fusion_chain.serving import Question

    client = async_http_client()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await client.aclose()

    app = FastAPI(lifespan=lifespan)
    add_routes(app, load_chain(stub, retriever, client), path="/rag-fusion", input_type=Question)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name="uvicorn-load", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the LangServe test server did not start")
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}/rag-fusion"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


async def run_remote(
    url: str, questions: Sequence[str], concurrency: int = CLIENT_CONCURRENCY
) -> LoadRun:
    """One ``RemoteRunnable.ainvoke`` per question, ``concurrency`` at a time; clients closed."""
    from langserve import RemoteRunnable

    remote = RemoteRunnable(url, timeout=60)
    try:
        return await run_gated(remote, questions, concurrency)
    finally:
        await remote.async_client.aclose()
        remote.sync_client.close()


async def run_gated(
    runnable: Runnable[Any, Any], questions: Sequence[str], concurrency: int
) -> LoadRun:
    """One ``runnable.ainvoke`` per question, at most ``concurrency`` in flight, each timed."""
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def ask(question: str) -> Any:
        async with gate:
            started = time.perf_counter()
            answer = await runnable.ainvoke({"question": question})
            latencies.append(time.perf_counter() - started)
            return answer

    started = time.perf_counter()
    answers = await asyncio.gather(*(ask(question) for question in questions))
    return LoadRun(list(questions), list(answers), latencies, time.perf_counter() - started)


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


@pytest.fixture
def load_stub(clean_openai_stub: StubOpenAI) -> Iterator[tuple[StubOpenAI, StubModel]]:
    """The (reset) stub server answering as :class:`StubModel`."""
    model = StubModel()
    clean_openai_stub.script(model)
    yield clean_openai_stub, model


def assert_every_answer_matches(run: LoadRun) -> None:
    """All answers back, in order, each the answer to its own question from its own passages."""
    assert len(run.answers) == len(run.questions) == QUESTION_COUNT
    assert len({question_tag(question) for question in run.questions}) == QUESTION_COUNT
    for question, answer in zip(run.questions, run.answers, strict=True):
        assert isinstance(answer, str) and answer.strip()
        assert answer == expected_answer(question)


def test_stub_model_notices_crossed_wires() -> None:
    """The answer check can fail: a passage of another question changes the answer."""
    model = StubModel(delay=0)
    question, other = make_question(1), make_question(2)
    passages = [f"{question_tag(question)} angle-{i} / passage 0" for i in range(TOP_N - 1)]
    passages.append(f"{question_tag(other)} angle-0 / passage 0")
    context = chains.format_context([Document(text) for text in passages])
    prompt = f"Passages:\n{context}\n\nQuestion: {question}"
    answer = model([{"role": "user", "content": prompt}])
    assert answer != expected_answer(question)
    assert answer == f"{question_tag(question)}: {TOP_N - 1}/{TOP_N}"


def test_200_questions_through_abatch_stay_bounded_and_leak_nothing(
    load_stub: tuple[StubOpenAI, StubModel],
) -> None:
    stub, model = load_stub
    questions = [make_question(number) for number in range(QUESTION_COUNT)]
    # Warm up once: imports, lazily created pools and caches are not leaks.
    asyncio.run(run_abatch(stub, ProbeRetriever(), questions[:4]))
    baseline = Resources.now()
    model.probe = Probe()
    retriever = ProbeRetriever()

    run = asyncio.run(run_abatch(stub, retriever, questions, MAX_CONCURRENCY))

    assert_every_answer_matches(run)
    assert stub.counts["chat"] == 4 * 2 + QUESTION_COUNT * 2  # warm-up, then queries + answer
    assert retriever.calls.total == QUESTION_COUNT * SEARCHES_PER_QUESTION
    assert 1 < retriever.questions.peak <= MAX_CONCURRENCY
    assert model.probe.peak <= MAX_CONCURRENCY
    assert retriever.calls.peak <= MAX_CONCURRENCY * min(MAX_CONCURRENCY, SEARCHES_PER_QUESTION)
    after = baseline.settled_within(baseline, slack_sockets=2, grace=GRACE_SECONDS)
    assert after.threads <= baseline.threads, f"threads leaked: {baseline} -> {after}"
    assert after.sockets <= baseline.sockets + 2, f"sockets leaked: {baseline} -> {after}"


def test_a_concurrency_of_one_is_one_question_and_one_call_at_a_time(
    load_stub: tuple[StubOpenAI, StubModel],
) -> None:
    """The nested bound multiplies by one: nothing overlaps at all."""
    stub, model = load_stub
    retriever = ProbeRetriever(delay=0.001)
    questions = [make_question(number) for number in range(6)]

    run = asyncio.run(run_abatch(stub, retriever, questions, max_concurrency=1))

    assert run.answers == [expected_answer(question) for question in questions]
    assert retriever.calls.peak == retriever.questions.peak == model.probe.peak == 1


def test_200_questions_through_a_langserve_route_all_come_back_and_leak_nothing(
    load_stub: tuple[StubOpenAI, StubModel],
) -> None:
    pytest.importorskip("langserve")
    pytest.importorskip("uvicorn")
    stub, model = load_stub
    questions = [make_question(number) for number in range(QUESTION_COUNT)]
    with langserve_server(stub, ProbeRetriever()) as url:  # warm-up server, same as below
        asyncio.run(run_remote(url, questions[:4]))
    baseline = Resources.now()
    model.probe = Probe()
    retriever = ProbeRetriever()

    with langserve_server(stub, retriever) as url:
        run = asyncio.run(run_remote(url, questions, CLIENT_CONCURRENCY))

    assert_every_answer_matches(run)
    assert retriever.calls.total == QUESTION_COUNT * SEARCHES_PER_QUESTION
    assert 1 < retriever.questions.peak <= CLIENT_CONCURRENCY
    assert model.probe.peak <= CLIENT_CONCURRENCY
    after = baseline.settled_within(baseline, slack_sockets=2, grace=GRACE_SECONDS)
    assert after.threads <= baseline.threads, f"threads leaked: {baseline} -> {after}"
    assert after.sockets <= baseline.sockets + 2, f"sockets leaked: {baseline} -> {after}"
