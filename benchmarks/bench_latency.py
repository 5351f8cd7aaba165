"""Question to fused documents: the ready chain and FusionRetriever against LangChain's plain
``generator | retriever.map() | fusion``, over a grid of retriever latency and model speed.

Everything is in-process and deterministic; delays are injected where a deployment spends its time:

* the chat model (:class:`SleepyChat`) streams its reply token by token, sleeping ``--token-ms``
  before each (0: instant); asked for queries it writes ``--n`` lines of ``--words`` words, asked
  for an answer it writes one token;
* a retriever call waits ``latency`` seconds, like a remote store: the plain ``BaseRetriever``
  (:class:`RemoteRetriever`) on every call, the kit's ``VectorRetriever`` on every embedding request
  (:class:`RemoteEmbeddings`; a batch of queries is one request).

Compositions, each searching the question plus the ``n`` generated queries and each timed to its
fused documents, the moment its fusion step returns (all three fuse with :class:`StampedFusion`,
reciprocal rank fusion noting the time; no callback handler, which would slow only the one
composition it is attached to):

* ``map``: ``generator | retriever.map() | reciprocal_rank_fusion`` (two retrievers: both ``.map()``
  in a ``RunnableParallel``), LangChain's own parts, the baseline;
* ``chain``: ``rag_fusion_chain(retrievers, llm, include_original=True)``; its one-token answer
  comes after the fused documents and is not counted (the total is shown too);
* ``FusionRetriever(retrievers=..., query_generator=generator)``;
* the reference: generation alone (``generator.invoke``) plus one retrieval round (the ``.map()``
  part over all the queries at once), medians measured in the same run.

Times are medians over ``--runs`` questions per cell, compositions interleaved within a question;
ratios are medians of per-question ratios (both sides timed on the same question, moments apart).

    python benchmarks/bench_latency.py                      # the whole grid, 7 runs per cell
    python benchmarks/bench_latency.py --latency-ms 100 --token-ms 5 --retrievers 2 --runs 3
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import math
import re
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda, RunnableParallel
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import ConfigDict, Field

from rag_fusion_chain import chains, fusion, queries
from rag_fusion_chain.retrievers import FusionRetriever
from rag_fusion_chain.retrievers.stores import VectorRetriever

K = 4
"""Documents per search."""
WORDS = [
    "heat",
    "pump",
    "efficiency",
    "winter",
    "air",
    "source",
    "ground",
    "solar",
    "panel",
    "battery",
    "storage",
    "wind",
    "turbine",
    "insulation",
    "refrigerant",
    "compressor",
    "coil",
    "thermostat",
    "tidal",
    "geothermal",
    "grid",
    "electricity",
    "cost",
]
CORPUS = [
    Document(" ".join(WORDS[(start + step * 3) % len(WORDS)] for step in range(12)), id=f"d{start}")
    for start in range(len(WORDS))
]
QUESTIONS = [
    f"How does {WORDS[index]} affect {WORDS[(index + 5) % len(WORDS)]}?" for index in range(12)
]


# --------------------------------------------------------------------------------------------
# Fakes with injected delays
# --------------------------------------------------------------------------------------------


class SleepyChat(BaseChatModel):
    """Streams a scripted reply one token at a time, sleeping ``token_seconds`` before each."""

    token_seconds: float = 0.0
    query_lines: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "sleepy-fake-chat"

    def _reply(self, messages: list[BaseMessage]) -> str:
        prompt = "\n".join(str(message.content) for message in messages)
        return "ok" if "<passage" in prompt or "passages" in prompt else "\n".join(self.query_lines)

    def _tokens(self, messages: list[BaseMessage]) -> list[str]:
        return re.findall(r"\S+[ \n]?", self._reply(messages))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = "".join(chunk.message.content for chunk in self._stream(messages))  # type: ignore[misc]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for token in self._tokens(messages):
            if self.token_seconds:  # instant: not even sleep(0), which yields the GIL
                time.sleep(self.token_seconds)
            yield ChatGenerationChunk(message=AIMessageChunk(content=token))


def overlap_ranking(query: str, k: int) -> list[Document]:
    """The ``k`` corpus documents sharing most words with ``query`` (ties by corpus order)."""
    words = set(query.lower().replace("?", "").split())
    scored = sorted(CORPUS, key=lambda d: -len(words & set(d.page_content.split())))
    return scored[:k]


class Counter:
    """Requests made, across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def add(self) -> None:
        with self.lock:
            self.count += 1


class RemoteRetriever(BaseRetriever):
    """A plain LangChain retriever whose every call waits ``latency`` seconds."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    latency: float
    requests: Counter

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        self.requests.add()
        time.sleep(self.latency)
        return overlap_ranking(query, K)


class SerialRetriever(RemoteRetriever):
    """A remote retriever that serves one call at a time (a single-connection store): concurrent
    calls queue behind a lock, as with ``max_concurrency=1`` on its side."""

    lock: Any = Field(default_factory=threading.Lock)

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        with self.lock:
            return super()._get_relevant_documents(query, run_manager=run_manager)


class WordEmbeddings(Embeddings):
    """Deterministic bag of words over :data:`WORDS`, instant."""

    def _vector(self, text: str) -> list[float]:
        words = text.lower().replace("?", "").split()
        vector = [float(words.count(word)) for word in WORDS]
        norm = math.sqrt(sum(value * value for value in vector)) or 1.0
        return [value / norm for value in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


class RemoteEmbeddings(WordEmbeddings):
    """:class:`WordEmbeddings` behind a remote API: every request waits ``latency`` seconds."""

    def __init__(self, latency: float, requests: Counter) -> None:
        self.latency = latency
        self.requests = requests

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.requests.add()
        time.sleep(self.latency)
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def make_retrievers(kind: str, count: int, latency: float, requests: Counter) -> list[Any]:
    if kind == "plain":
        return [RemoteRetriever(latency=latency, requests=requests) for _ in range(count)]
    if kind == "serial":
        return [SerialRetriever(latency=latency, requests=requests) for _ in range(count)]
    store = InMemoryVectorStore.from_documents(CORPUS, WordEmbeddings())
    return [
        VectorRetriever(vectorstore=store, embeddings=RemoteEmbeddings(latency, requests), k=K)
        for _ in range(count)
    ]


# --------------------------------------------------------------------------------------------
# Compositions
# --------------------------------------------------------------------------------------------


def mapped(retrievers: Sequence[Any]) -> Runnable[Any, Any]:
    """``retriever.map()`` for one retriever; for several, all maps side by side, lists joined."""
    if len(retrievers) == 1:
        return retrievers[0].map()
    parallel = RunnableParallel({f"r{i}": r.map() for i, r in enumerate(retrievers)})
    return parallel | RunnableLambda(
        lambda out: [ranked for lists in out.values() for ranked in lists]
    )


class FuseClock:
    """When fusion last returned: the moment a composition's fused documents exist."""

    def __init__(self) -> None:
        self.ended_at: float | None = None


class StampedFusion(fusion.ReciprocalRankFusion):
    """Reciprocal rank fusion that notes on ``clock`` when it returns.

    All three compositions fuse with it, so each is timed to its fused documents the same way (in
    ``fuse``, which ``invoke`` and the ready chain's ``fuse`` step both run); a callback handler
    would slow only the composition it is attached to (it is called for every run and every
    streamed token).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    clock: FuseClock

    def fuse(self, ranked_lists: Any) -> Any:
        output = super().fuse(ranked_lists)
        self.clock.ended_at = time.perf_counter()
        return output


@dataclass
class Cell:
    kind: str
    retrievers: int
    latency_ms: float
    token_ms: float
    timings: dict[str, list[float]] = field(default_factory=dict)
    requests: dict[str, list[int]] = field(default_factory=dict)

    def median_ms(self, name: str) -> float:
        return statistics.median(self.timings[name]) * 1000


def timed(function: Callable[[], Any]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def measure_cell(
    cell: Cell, n: int, words: int, runs: int, max_concurrency: int | None = None
) -> Cell:
    """``max_concurrency``: the callers' config bound, given to every composition alike."""
    config: RunnableConfig = {} if max_concurrency is None else {"max_concurrency": max_concurrency}
    requests = Counter()
    retrievers = make_retrievers(cell.kind, cell.retrievers, cell.latency_ms / 1000, requests)
    llm = SleepyChat(token_seconds=cell.token_ms / 1000)
    generator = queries.rag_fusion(llm, n, include_original=True)
    search = mapped(retrievers)
    clock = FuseClock()
    stamped = StampedFusion(clock=clock)
    compositions: dict[str, Callable[[str, list[str]], Any]] = {}
    map_chain = generator | search | stamped
    ready = chains.rag_fusion_chain(retrievers, llm, n=n, include_original=True, fusion=stamped)
    fusion_retriever = FusionRetriever(
        retrievers=retrievers, query_generator=generator, fusion=stamped
    )

    def to_fused(run: Callable[[], Any], total: str | None = None) -> float:
        """Seconds from the call to its fused documents (to its end, kept as ``total``)."""
        clock.ended_at = None
        started = time.perf_counter()
        run()
        if total is not None:
            cell.timings.setdefault(total, []).append(time.perf_counter() - started)
        assert clock.ended_at is not None, "the composition did not fuse"
        return clock.ended_at - started

    compositions["map"] = lambda question, _: to_fused(lambda: map_chain.invoke(question, config))
    compositions["chain"] = lambda question, _: to_fused(
        lambda: ready.invoke({"question": question}, config), total="chain total"
    )
    compositions["FusionRetriever"] = lambda question, _: to_fused(
        lambda: fusion_retriever.invoke(question, config)
    )
    compositions["generation"] = lambda question, _: timed(
        lambda: generator.invoke(question, config)
    )
    compositions["round"] = lambda _, searched: timed(lambda: search.invoke(searched, config))

    for run in range(runs + 1):  # the first question warms up
        question = QUESTIONS[run % len(QUESTIONS)]
        lines = [
            " ".join(WORDS[(run + line * 7 + word) % len(WORDS)] for word in range(words))
            for line in range(n)
        ]
        llm.query_lines = lines
        searched = [question, *lines]
        for name, composition in compositions.items():
            before = requests.count
            seconds = composition(question, searched)
            if run:
                cell.timings.setdefault(name, []).append(seconds)
                cell.requests.setdefault(name, []).append(requests.count - before)
        if not run:
            cell.timings.pop("chain total", None)
    return cell


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def paired_ratio(cell: Cell, name: str, *against: str) -> float:
    """Median over questions of ``name``'s time over the sum of ``against`` times for the same
    question: slow moments of a shared machine hit both sides of a pair alike."""
    runs = range(len(cell.timings[name]))
    return statistics.median(
        cell.timings[name][run] / sum(cell.timings[other][run] for other in against) for run in runs
    )


def row(cell: Cell) -> str:
    def ratio(name: str, target: float, *against: str) -> str:
        value = paired_ratio(cell, name, *against)
        return f"{value:.2f}" if value <= target else f"**{value:.2f}**"

    requests = "/".join(
        f"{statistics.median(cell.requests[name]):g}"
        for name in ("map", "chain", "FusionRetriever")
    )
    return (
        f"| {cell.latency_ms:g} | {cell.token_ms:g} | {cell.retrievers} "
        f"| {cell.median_ms('generation'):.0f} | {cell.median_ms('round'):.0f} "
        f"| {cell.median_ms('map'):.0f} "
        f"| {cell.median_ms('chain'):.0f} ({cell.median_ms('chain total'):.0f}) "
        f"| {cell.median_ms('FusionRetriever'):.0f} "
        f"| {ratio('chain', 1.05, 'map')} | {ratio('FusionRetriever', 1.05, 'map')} "
        f"| {ratio('chain', 1.2, 'generation', 'round')} "
        f"| {ratio('FusionRetriever', 1.2, 'generation', 'round')} | {requests} |"
    )


HEADER = (
    "| retrieval ms/call | model ms/token | retrievers | generation | one round | map "
    "| chain to documents (total) | FusionRetriever | chain / map | FR / map "
    "| chain / (gen + round) | FR / (gen + round) | requests / question: map/chain/FR |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[10.0, 100.0, 500.0])
    parser.add_argument("--token-ms", type=float, nargs="+", default=[0.0, 5.0, 20.0])
    parser.add_argument("--retrievers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--kinds", nargs="+", default=["plain", "serial", "vector"])
    parser.add_argument("--n", type=int, default=4, help="generated queries")
    parser.add_argument("--words", type=int, default=6, help="words per generated query")
    parser.add_argument("--runs", type=int, default=7, help="questions timed per cell")
    parser.add_argument(
        "--max-concurrency", type=int, help="the config's bound, given to every composition"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[Cell]:
    argv = list(sys.argv[1:] if argv is None else argv)
    arguments = parse_arguments(argv)
    print(
        f"`{shlex.join(['python', 'benchmarks/bench_latency.py', *argv])}`, "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, medians of "
        f"{arguments.runs}; ms; ratios: medians of per-question ratios; bold: over target "
        "(1.05 x map, 1.2 x gen + round)\n"
    )
    cells = []
    for kind in arguments.kinds:
        label = {
            "plain": "plain BaseRetriever",
            "serial": "a retriever serving one call at a time",
            "vector": "the kit's VectorRetriever",
        }[kind]
        print(f"\n### {label}\n\n{HEADER}", flush=True)
        for latency, token, count in itertools.product(
            arguments.latency_ms, arguments.token_ms, arguments.retrievers
        ):
            cell = measure_cell(
                Cell(kind, count, latency, token),
                arguments.n,
                arguments.words,
                arguments.runs,
                arguments.max_concurrency,
            )
            cells.append(cell)
            print(row(cell), flush=True)
    return cells


if __name__ == "__main__":
    main()
