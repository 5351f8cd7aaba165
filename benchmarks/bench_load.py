"""Load benchmark: latency of a RAG-Fusion chain under load, through ``abatch`` and LangServe.

The set-up is the load test's (``tests/test_load.py``): the real ``ChatOpenAI`` talking to the stub
OpenAI server on 127.0.0.1 (a few milliseconds of "thinking" per request, replies streamed word by
word), one retriever with a small delay, four generated queries per question, five fused passages.

* ``abatch``: one ``chain.abatch`` call with ``max_concurrency``; a question's latency runs from
  its chain run's start to its end (callbacks). A chain is a ``RunnableSequence``, whose batch runs
  step by step over all inputs, so every answer arrives at the end: latency is the whole batch.
* ``ainvoke``: one ``chain.ainvoke`` per question, ``max_concurrency`` in flight (a semaphore);
  latency from holding a slot to the answer. This is what a server does per request.
* ``langserve``: the chain served by ``langserve.add_routes`` under uvicorn (in a thread), called
  through ``RemoteRunnable.ainvoke``, ``--client-concurrency`` requests in flight; a request's
  latency is measured by the client once it holds a slot.

Client, server and stub share one process (and the GIL) on this machine, so the figures compare
the two paths with each other, not with a deployment. Prints a Markdown table.

    python benchmarks/bench_load.py                      # 200 questions, concurrency 8 and 16
    python benchmarks/bench_load.py --questions 500 --max-concurrency 4 --client-concurrency 4
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the load harness lives in tests/

from tests.stub_openai import StubOpenAI  # noqa: E402
from tests.test_load import (  # noqa: E402
    CLIENT_CONCURRENCY,
    MAX_CONCURRENCY,
    MODEL_DELAY,
    QUESTION_COUNT,
    LoadRun,
    ProbeRetriever,
    StubModel,
    async_http_client,
    expected_answer,
    langserve_server,
    load_chain,
    make_question,
    run_abatch,
    run_gated,
    run_remote,
)


async def run_ainvoke(
    stub: StubOpenAI, questions: list[str], concurrency: int = MAX_CONCURRENCY
) -> LoadRun:
    """One ``chain.ainvoke`` per question, ``concurrency`` in flight; the HTTP client closed."""
    client = async_http_client()
    try:
        return await run_gated(load_chain(stub, ProbeRetriever(), client), questions, concurrency)
    finally:
        await client.aclose()


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``values`` (nearest rank, as latency reports use)."""
    ordered = sorted(values)
    rank = max(1, round(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def row(path: str, concurrency: int, run: LoadRun, peak_model_requests: int) -> str:
    """One Markdown table row: latencies in milliseconds, throughput in questions per second."""
    answered = sum(
        answer == expected_answer(question)
        for question, answer in zip(run.questions, run.answers, strict=True)
    )
    latencies = run.latencies
    return (
        f"| {path} | {len(run.questions)} | {concurrency} | {answered} "
        f"| {percentile(latencies, 0.50) * 1000:.0f} | {percentile(latencies, 0.99) * 1000:.0f} "
        f"| {statistics.fmean(latencies) * 1000:.0f} | {len(run.questions) / run.wall_seconds:.1f} "
        f"| {peak_model_requests} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=QUESTION_COUNT)
    parser.add_argument("--max-concurrency", type=int, default=MAX_CONCURRENCY)
    parser.add_argument("--client-concurrency", type=int, default=CLIENT_CONCURRENCY)
    parser.add_argument("--model-delay", type=float, default=MODEL_DELAY, help="seconds")
    arguments = parser.parse_args()
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # langserve on pydantic 2.11+

    questions = [make_question(number) for number in range(arguments.questions)]
    rows = []
    with StubOpenAI() as stub:
        model = StubModel(delay=arguments.model_delay)
        stub.script(model)
        asyncio.run(run_abatch(stub, ProbeRetriever(), questions[:4]))  # warm-up
        model.probe.peak = 0
        run = asyncio.run(run_abatch(stub, ProbeRetriever(), questions, arguments.max_concurrency))
        rows.append(row("abatch", arguments.max_concurrency, run, model.probe.peak))

        model.probe.peak = 0
        run = asyncio.run(run_ainvoke(stub, questions, arguments.max_concurrency))
        rows.append(row("ainvoke", arguments.max_concurrency, run, model.probe.peak))

        with langserve_server(stub, ProbeRetriever()) as url:
            asyncio.run(run_remote(url, questions[:4]))  # warm-up
            model.probe.peak = 0
            run = asyncio.run(run_remote(url, questions, arguments.client_concurrency))
        rows.append(row("langserve", arguments.client_concurrency, run, model.probe.peak))

    print(
        f"RAG-Fusion chain, real ChatOpenAI on the stub server ({arguments.model_delay * 1000:g} ms "
        "per model request), 4 queries and 5 fused passages per question\n"
    )
    print(
        "| path | questions | concurrency | answered | p50 ms | p99 ms | mean ms | questions/s "
        "| peak model requests |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for line in rows:
        print(line)
    print(
        "\nabatch runs the chain step by step over all questions, so each answer waits for the "
        "whole batch; ainvoke and langserve answer each question as soon as it is done."
    )


if __name__ == "__main__":
    main()
