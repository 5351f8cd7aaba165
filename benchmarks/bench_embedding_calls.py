"""Embedding requests per question in a RAG-Fusion retrieval, the kit's VectorRetriever against
LangChain's plain ``vectorstore.as_retriever()``.

Set-up: the kit's sample corpus (300 SciFact abstracts) in FAISS (``stores.build_faiss``), embedded
by ``OpenAIEmbeddings`` (``models.openai_embeddings``) pointed at the stub OpenAI-compatible server of
``tests/stub_openai.py`` on 127.0.0.1, which counts every ``/v1/embeddings`` request. Queries come
from ``queries.rag_fusion`` over a ``FakeListChatModel`` that always lists N queries;
``include_original=True`` adds the question, so N + 1 queries are searched per question.

Compositions, each run with ``invoke``, ``ainvoke`` and ``stream`` over the same questions:

* ``chains.rag_fusion_chain(retriever, llm, n=N, include_original=True)`` (retrieval, RRF, answer);
* ``queries.rag_fusion(llm, N, include_original=True) | retriever.map() | reciprocal_rank_fusion``,
  as the tutorials compose it;

with ``retriever`` either ``VectorRetriever(vectorstore=store)`` (the kit: one
``embed_documents(queries)`` per batch) or ``store.as_retriever()`` (one ``embed_query`` per
query). Only requests made while answering are counted (building the index is not).

``chains.rag_fusion_chain`` streams the queries into its fan-out (``MultiRetriever``), which
micro-batches them: the original question is searched at once, and generated queries that arrive
while a batch is in flight go together in the next one. Its request count therefore lies between
1 and N + 1 and depends on how fast the model streams against how fast an embedding request
returns: ``--char-delay`` slows the fake model down (per streamed character) to show that.
``retriever.map()`` waits for the whole query list, so it makes one batch.

    python benchmarks/bench_embedding_calls.py                # N in 1, 4, 8; 5 questions
    python benchmarks/bench_embedding_calls.py --n 1 4 8 16 --questions 10
    python benchmarks/bench_embedding_calls.py --char-delay 0.005   # a model streaming slowly
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import FakeListChatModel
from langchain_core.runnables import Runnable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the stub server lives in tests/
    sys.path.insert(0, str(ROOT))

from rag_fusion_chain import chains, fusion, ingest, models, queries  # noqa: E402
from rag_fusion_chain.data import sample_corpus_path, sample_queries  # noqa: E402
from rag_fusion_chain.retrievers.stores import VectorRetriever, build_faiss  # noqa: E402
from tests.stub_openai import StubOpenAI  # noqa: E402

K = 4


def query_lines(count: int) -> str:
    """What the fake chat model answers: ``count`` numbered, distinct queries."""
    return "\n".join(
        f"{index}. search angle {index}: cancer risk factors" for index in range(1, count + 1)
    )


def compositions(
    retriever: Runnable[Any, Any], n: int, char_delay: float = 0.0
) -> dict[str, Callable[[], Runnable[Any, Any]]]:
    """Fresh runnables (each with its own fake model) for the two ways of composing RAG-Fusion."""

    def fake_llm() -> FakeListChatModel:
        return FakeListChatModel(responses=[query_lines(n)], sleep=char_delay or None)

    return {
        "chains.rag_fusion_chain": lambda: chains.rag_fusion_chain(
            retriever, fake_llm(), n=n, include_original=True, return_sources=True
        ),
        "generator | retriever.map() | fusion": lambda: (
            queries.rag_fusion(fake_llm(), n, include_original=True)
            | retriever.map()
            | fusion.reciprocal_rank_fusion
        ),
    }


def searched_queries(composition: str, runnable: Runnable[Any, Any], question: str) -> int:
    """How many queries the composition searches for one question (the generator's output)."""
    if composition == "chains.rag_fusion_chain":
        return len(runnable.invoke({"question": question})["queries"])
    generator = runnable.first  # type: ignore[attr-defined]
    return len(generator.invoke({"question": question}))


def count_requests(stub: StubOpenAI, before: tuple[int, int]) -> tuple[int, int]:
    """(embedding requests, texts embedded) since ``before`` (a :func:`snapshot`)."""
    return stub.counts["embeddings"] - before[0], sum(stub.embedding_batch_sizes[before[1] :])


def snapshot(stub: StubOpenAI) -> tuple[int, int]:
    return stub.counts["embeddings"], len(stub.embedding_batch_sizes)


async def measure(
    stub: StubOpenAI,
    store: Any,
    counts: Sequence[int],
    questions: Sequence[str],
    char_delay: float = 0.0,
) -> list[dict[str, Any]]:
    """One row per (composition, retriever, N): requests and texts per question, both call styles.

    A coroutine so that every ``ainvoke`` runs in one event loop (the OpenAI async client is
    bound to the loop that first used it).
    """
    retrievers = {
        "kit VectorRetriever": VectorRetriever(vectorstore=store, k=K),
        "plain as_retriever()": store.as_retriever(search_kwargs={"k": K}),
    }
    inputs = [{"question": question} for question in questions]
    rows = []
    for n in counts:
        for retriever_name, retriever in retrievers.items():
            for composition, build in compositions(retriever, n, char_delay).items():
                before = snapshot(stub)
                for value in inputs:
                    build().invoke(value)
                sync_requests, texts = count_requests(stub, before)
                before = snapshot(stub)
                for value in inputs:
                    await build().ainvoke(value)
                async_requests, _ = count_requests(stub, before)
                before = snapshot(stub)
                for value in inputs:
                    for _ in build().stream(value):
                        pass
                stream_requests, _ = count_requests(stub, before)
                rows.append(
                    {
                        "composition": composition,
                        "retriever": retriever_name,
                        "n": n,
                        "queries": searched_queries(composition, build(), questions[0]),
                        "invoke": sync_requests / len(questions),
                        "ainvoke": async_requests / len(questions),
                        "stream": stream_requests / len(questions),
                        "texts": texts / len(questions),
                    }
                )
    return rows


def escaped(text: str) -> str:
    """A Markdown table cell: pipes escaped, even inside code spans (GFM)."""
    return text.replace("|", "\\|")


def table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| composition | retriever | N | queries searched | embedding requests / question "
        "(invoke) | (ainvoke) | (stream) | texts embedded / question |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| `{escaped(row['composition'])}` | {row['retriever']} | {row['n']} "
            f"| {row['queries']} | {row['invoke']:g} | {row['ainvoke']:g} | {row['stream']:g} "
            f"| {row['texts']:g} |"
        )
    return "\n".join(lines)


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 4, 8], help="generated queries")
    parser.add_argument("--questions", type=int, default=5, help="sample questions asked")
    parser.add_argument("--docs", type=int, default=None, help="first N sample documents only")
    parser.add_argument(
        "--char-delay",
        type=float,
        default=0.0,
        help="seconds the fake model waits before each streamed character (0: instant)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    arguments = parse_arguments(argv)
    questions = [record["text"] for record in sample_queries()[: arguments.questions]]
    documents = ingest.load([sample_corpus_path()])[: arguments.docs]
    with StubOpenAI() as stub:
        embeddings = models.openai_embeddings(
            "stub-embedding", base_url=stub.base_url, api_key="sk-bench"
        )
        store = build_faiss(documents, embeddings)
        rows = asyncio.run(measure(stub, store, arguments.n, questions, arguments.char_delay))
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
