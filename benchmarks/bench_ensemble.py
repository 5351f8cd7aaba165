"""Hybrid search over two stock retrievers: the kit against LangChain's ``EnsembleRetriever``.

Same two retrievers for all (community ``BM25Retriever`` and an ``InMemoryVectorStore``
retriever over the same passages, a deterministic fake embedding), same question, timed moments
apart, in turn:

* ``ensemble``: ``EnsembleRetriever(retrievers=[bm25, vectors])`` (langchain-classic), the baseline;
* ``fusion retriever``: ``FusionRetriever(retrievers=[bm25, vectors])`` (no query generation);
* ``fan-out | rrf``: ``MultiRetriever([bm25, vectors]) | reciprocal_rank_fusion``.

Medians over ``--runs`` questions per size; the ratio is the median of per-question ratios.

    python benchmarks/bench_ensemble.py                 # 1,000 and 10,000 passages
    python benchmarks/bench_ensemble.py --passages 1000 --runs 300
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore

from rag_fusion_chain.fusion import reciprocal_rank_fusion
from rag_fusion_chain.retrievers import FusionRetriever, MultiRetriever

WORDS = [
    "heat",
    "pump",
    "winter",
    "air",
    "ground",
    "solar",
    "panel",
    "wind",
    "turbine",
    "battery",
    "storage",
    "grid",
    "insulation",
    "efficiency",
    "cold",
    "house",
    "energy",
    "water",
    "boiler",
    "electricity",
    "cost",
    "carbon",
    "emission",
    "roof",
    "window",
]


def passages(count: int, seed: int = 7) -> list[Document]:
    chooser = random.Random(seed)
    return [
        Document(" ".join(chooser.choices(WORDS, k=12)), metadata={"source": f"p{i}"})
        for i in range(count)
    ]


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def measure(count: int, runs: int) -> dict[str, Any]:
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever

    documents = passages(count)
    bm25 = BM25Retriever.from_documents(documents, k=5)
    store = InMemoryVectorStore.from_documents(documents, DeterministicFakeEmbedding(size=64))
    vectors = store.as_retriever(search_kwargs={"k": 5})
    compositions = {
        "ensemble": EnsembleRetriever(retrievers=[bm25, vectors]),
        "fusion retriever": FusionRetriever(retrievers=[bm25, vectors], k=10),
        "fan-out | rrf": MultiRetriever([bm25, vectors]) | reciprocal_rank_fusion,
    }
    chooser = random.Random(11)
    times: dict[str, list[float]] = {name: [] for name in compositions}
    for _ in range(5):  # warm-up
        for composition in compositions.values():
            composition.invoke("heat pump winter")
    for _ in range(runs):
        question = " ".join(chooser.choices(WORDS, k=4))
        for name, composition in compositions.items():
            times[name].append(timed(lambda c=composition, q=question: c.invoke(q)))
    base = times["ensemble"]
    return {
        "count": count,
        **{name: statistics.median(values) * 1000 for name, values in times.items()},
        **{
            f"{name} / ensemble": statistics.median(
                t / b for t, b in zip(values, base, strict=True)
            )
            for name, values in times.items()
            if name != "ensemble"
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--runs", type=int, default=200)
    arguments = parser.parse_args()
    warnings.simplefilter("ignore")
    print(
        "| passages | ensemble ms | FusionRetriever ms | fan-out \\| rrf ms "
        "| FusionRetriever / ensemble | fan-out \\| rrf / ensemble |"
    )
    print("|---|---|---|---|---|---|")
    for count in arguments.passages:
        row = measure(count, arguments.runs)
        print(
            f"| {count:,} | {row['ensemble']:.2f} | {row['fusion retriever']:.2f} "
            f"| {row['fan-out | rrf']:.2f} | {row['fusion retriever / ensemble']:.2f} "
            f"| {row['fan-out | rrf / ensemble']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
