"""Question to fused documents: the tutorials' sequential RAG-Fusion against the kit's streamed one.

Set-up, all on 127.0.0.1, with delays injected where a real deployment spends its time:

* the chat model: the stub OpenAI-compatible server of ``tests/stub_openai.py`` streaming its reply
  one word at a time, ``--token-ms`` apart; it lists ``--n`` queries of ``--words`` words each;
* the embeddings: a second stub server answering every ``/v1/embeddings`` request after
  ``--embedding-ms``;
* the store: the sample corpus (300 SciFact abstracts) in FAISS, whose index answers every search
  call after ``--search-ms`` (:class:`LatentIndex`; searches run concurrently, as on a server).

Compositions, timed from the question to the fused documents:

* ``tutorial``: ``prompt | llm | StrOutputParser() | split lines | store.as_retriever().map() |
  reciprocal_rank_fusion``, every step waiting for the whole output of the one before;
* ``kit``: ``StreamingInvoke(queries.rag_fusion(llm, n, include_original=True) |
  MultiRetriever(VectorRetriever(store)) | reciprocal_rank_fusion)``: the question is searched at
  once, each generated query as soon as its line is complete, embeddings micro-batched;
* the reference, measured in the same run: generation alone (``prompt | llm |
  StrOutputParser()``) plus one retrieval round (the kit's fan-out over all the queries at once).

Both use the same ``ChatOpenAI(streaming=True)``: the stub only spaces out tokens when it streams,
and a real model takes as long to write its reply either way. ``--max-concurrency 1`` passes that
config to both, as one would for a rate-limited API. Every combination of the ``--token-ms`` and
``--max-concurrency`` values given is measured; medians over ``--runs`` questions per call style.

    python benchmarks/bench_latency.py
    python benchmarks/bench_latency.py --token-ms 20 5 --max-concurrency 0 1 \\
        --output benchmarks/results/latency.md
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import shlex
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the stub server lives in tests/
    sys.path.insert(0, str(ROOT))

from rag_fusion_chain import fusion, ingest, models, prompts, queries  # noqa: E402
from rag_fusion_chain.data import sample_corpus_path, sample_queries  # noqa: E402
from rag_fusion_chain.retrievers.fanout import MultiRetriever, StreamingInvoke  # noqa: E402
from rag_fusion_chain.retrievers.stores import VectorRetriever, build_faiss  # noqa: E402
from tests.stub_openai import StubOpenAI  # noqa: E402

K = 4
"""Documents per search."""
TUTORIAL = "tutorial: prompt | llm | parser | split | retriever.map() | rrf"
KIT = "kit: StreamingInvoke(generator | MultiRetriever | rrf)"
GENERATION = "generation alone"
ROUND = "one retrieval round"


class LatentIndex:
    """A FAISS index whose every ``search`` call first waits ``latency`` seconds, like a remote
    store; everything else is the wrapped index's."""

    def __init__(self, index: Any, latency: float) -> None:
        self.index = index
        self.latency = latency

    def search(self, *arguments: Any, **keywords: Any) -> Any:
        time.sleep(self.latency)
        return self.index.search(*arguments, **keywords)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.index, name)


@dataclass
class Results:
    """Timings (seconds) per (composition, call style) and embedding requests per composition,
    one entry per question, at one token delay and one ``max_concurrency``."""

    token_ms: float
    max_concurrency: int | None
    timings: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    embedding_requests: dict[str, list[int]] = field(default_factory=dict)

    @property
    def config(self) -> RunnableConfig:
        return {"max_concurrency": self.max_concurrency} if self.max_concurrency else {}


# --------------------------------------------------------------------------------------------
# Compositions
# --------------------------------------------------------------------------------------------


def query_lines(question: str, count: int, words: int) -> list[str]:
    """``count`` distinct queries of ``words`` words, drawn from the question's own words."""
    vocabulary = question.rstrip("?.").split() * (words + count)
    return [" ".join(vocabulary[start : start + words]) for start in range(count)]


def split_lines(text: str) -> list[str]:
    """The tutorials' parser: one query per line."""
    return [line for line in text.split("\n") if line.strip()]


def tutorial(llm: Runnable[Any, Any], store: Any, n: int) -> Runnable[Any, Any]:
    prompt = prompts.RAG_FUSION_PROMPT.partial(n=str(n))
    return (
        prompt
        | llm
        | StrOutputParser()
        | RunnableLambda(split_lines)
        | store.as_retriever(search_kwargs={"k": K}).map()
        | fusion.reciprocal_rank_fusion
    )


def kit(llm: Runnable[Any, Any], retriever: VectorRetriever, n: int) -> Runnable[Any, Any]:
    generator = queries.rag_fusion(llm, n, include_original=True)
    return StreamingInvoke(generator | MultiRetriever(retriever) | fusion.reciprocal_rank_fusion)


def generation(llm: Runnable[Any, Any], n: int) -> Runnable[Any, Any]:
    return prompts.RAG_FUSION_PROMPT.partial(n=str(n)) | llm | StrOutputParser()


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


def timed(function: Callable[[], Any]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


async def atimed(function: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await function()
    return time.perf_counter() - started


async def measure_question(
    results: Results,
    runnables: dict[str, Runnable[Any, Any]],
    inputs: dict[str, Any],
    embedding_stub: StubOpenAI,
) -> None:
    """Time every composition once per call style; count its embedding requests (invoke)."""
    for name, runnable in runnables.items():
        value = inputs[name]
        before = embedding_stub.counts["embeddings"]
        seconds = timed(lambda: runnable.invoke(value, results.config))  # noqa: B023 - run at once
        requests = embedding_stub.counts["embeddings"] - before
        results.embedding_requests.setdefault(name, []).append(requests)
        results.timings.setdefault((name, "invoke"), []).append(seconds)
        seconds = await atimed(lambda: runnable.ainvoke(value, results.config))  # noqa: B023
        results.timings.setdefault((name, "ainvoke"), []).append(seconds)


async def measure(
    arguments: argparse.Namespace,
    llm: Runnable[Any, Any],
    store: Any,
    chat_stub: StubOpenAI,
    embedding_stub: StubOpenAI,
) -> list[Results]:
    """For each token delay and ``max_concurrency``: one warm-up question, then ``runs``.

    A coroutine so that every ``ainvoke`` runs in one event loop (the OpenAI async client is
    bound to the loop that first used it).
    """
    retriever = VectorRetriever(vectorstore=store, k=K)
    runnables = {
        TUTORIAL: tutorial(llm, store, arguments.n),
        KIT: kit(llm, retriever, arguments.n),
        GENERATION: generation(llm, arguments.n),
        ROUND: MultiRetriever(retriever),
    }
    questions = [record["text"] for record in sample_queries()]
    measured = []
    for token_ms, bound in itertools.product(arguments.token_ms, arguments.max_concurrency):
        chat_stub.set_delay(token=token_ms / 1000)
        warm_up, results = Results(token_ms, bound or None), Results(token_ms, bound or None)
        for run in range(arguments.runs + 1):
            question = questions[run % len(questions)]
            generated = query_lines(question, arguments.n, arguments.words)
            chat_stub.script(lambda messages: "\n".join(generated))  # noqa: B023 - this question's
            inputs = {
                TUTORIAL: {"question": question},
                KIT: question,
                GENERATION: {"question": question},
                ROUND: [question, *generated],
            }
            await measure_question(results if run else warm_up, runnables, inputs, embedding_stub)
        measured.append(results)
    return measured


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1000


def table(results: Results) -> str:
    """Medians per composition and call style, and each against generation + one round."""
    lines = [
        "| composition | call | median ms | / (generation + one round) "
        "| embedding requests / question |",
        "|---|---|---|---|---|",
    ]
    for style in ("invoke", "ainvoke"):
        reference = median_ms(results.timings[(GENERATION, style)]) + median_ms(
            results.timings[(ROUND, style)]
        )
        for name in (TUTORIAL, KIT, GENERATION, ROUND):
            median = median_ms(results.timings[(name, style)])
            requests = statistics.median(results.embedding_requests[name])
            lines.append(
                f"| {escaped(name)} | {style} | {median:.0f} | {median / reference:.2f} "
                f"| {requests:g} |"
            )
        lines.append(f"| generation + one round | {style} | {reference:.0f} | 1.00 | |")
    return "\n".join(lines)


def escaped(text: str) -> str:
    """A Markdown table cell: pipes escaped."""
    return text.replace("|", "\\|")


def heading(arguments: argparse.Namespace, results: Results) -> str:
    return (
        f"{results.token_ms:g} ms per token, max_concurrency "
        f"{results.max_concurrency or 'unbounded'}: {arguments.n} generated "
        f"queries of {arguments.words} words, "
        f"{arguments.embedding_ms:g} ms per embedding request, {arguments.search_ms:g} ms per "
        f"search call, medians over {arguments.runs} questions"
    )


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=4, help="generated queries")
    parser.add_argument("--words", type=int, default=8, help="words per generated query")
    parser.add_argument(
        "--token-ms", type=float, nargs="+", default=[20.0], help="delays per streamed token"
    )
    parser.add_argument("--embedding-ms", type=float, default=50.0, help="per embedding request")
    parser.add_argument("--search-ms", type=float, default=50.0, help="per store search call")
    parser.add_argument(
        "--max-concurrency", type=int, nargs="+", default=[0], help="bounds run; 0: unbounded"
    )
    parser.add_argument("--runs", type=int, default=7, help="questions timed per bound")
    parser.add_argument("--docs", type=int, default=None, help="first N sample documents only")
    parser.add_argument("--output", type=Path, default=None, help="also write the report here")
    return parser.parse_args(argv)


def build_store(documents: Sequence[Any], embedding_stub: StubOpenAI, search_delay: float) -> Any:
    """FAISS over ``documents`` embedded by the stub (before its delay is set), searched slowly."""
    embeddings = models.openai_embeddings(
        "stub-embedding", base_url=embedding_stub.base_url, api_key="sk-bench"
    )
    store = build_faiss(documents, embeddings)
    store.index = LatentIndex(store.index, search_delay)
    return store


def report(measured: Sequence[Results], arguments: argparse.Namespace, argv: Sequence[str]) -> str:
    command = shlex.join(["python", "benchmarks/bench_latency.py", *argv])
    sections = [
        "# Question to fused documents: latency",
        f"`{command}` on {datetime.date.today().isoformat()}, stub servers on 127.0.0.1 (see the "
        "script's docstring). Ratios are against generation alone plus one retrieval round, both "
        "measured in the same run; the target for the kit is at most 1.2.",
        "How to read it: the tutorials' composition searches only once the model has finished, "
        "its `.map()` running the searches side by side as far as `max_concurrency` allows; the "
        "kit searches the question at once and each query as soon as its line is complete, so "
        "only the last query's search is left when the model finishes. Embedding requests: the "
        "tutorial makes one per query; the kit one per micro-batch (queries that arrive while "
        "an embedding call is in flight share the next), its question included.",
    ]
    for results in measured:
        sections += [f"## {heading(arguments, results)}", table(results)]
    return "\n\n".join(sections) + "\n"


def main(argv: Sequence[str] | None = None) -> list[Results]:
    argv = list(sys.argv[1:] if argv is None else argv)
    arguments = parse_arguments(argv)
    documents = ingest.load([sample_corpus_path()])[: arguments.docs]
    with StubOpenAI() as chat_stub, StubOpenAI() as embedding_stub:
        store = build_store(documents, embedding_stub, arguments.search_ms / 1000)
        embedding_stub.set_delay(request=arguments.embedding_ms / 1000)
        llm = models.chat_model(
            "stub-chat", base_url=chat_stub.base_url, api_key="sk-bench", streaming=True
        )
        measured = asyncio.run(measure(arguments, llm, store, chat_stub, embedding_stub))
    text = report(measured, arguments, argv)
    print(text)
    if arguments.output is not None:
        arguments.output.write_text(text, encoding="utf-8")
    return measured


if __name__ == "__main__":
    main()
