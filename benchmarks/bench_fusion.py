"""Fusion micro-benchmark: the kit's runnables against the tutorials' approach and a bare loop.

Baselines, both producing the same output as the kit (new Documents carrying the fused score):
* ``dumps-keyed``: the tutorials' RRF, keying documents by ``langchain_core.load.dumps`` and
  rebuilding them with ``loads``;
* ``bare loop``: a hand-written dict loop keyed by document text, the fastest plain Python.

Each kit runnable is called through ``.invoke`` (callbacks and all) and timed alternately with the
baselines in the same run; the table shows medians and the median of per-pair ratios.

    python benchmarks/bench_fusion.py            # the issue's 10 lists x 100 documents
    python benchmarks/bench_fusion.py --grid     # 5 to 20 lists x 4 to 1000 documents
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial

from langchain_core.documents import Document
from langchain_core.load import dumps, loads

from rag_fusion_chain import fusion


def make_lists(list_count: int, list_length: int, seed: int = 0) -> list[list[Document]]:
    """Ranked lists drawn from a shared pool, so documents recur across lists as in real fusion."""
    generator = random.Random(seed)
    pool = [
        {"text": f"passage {index} " + "lorem ipsum " * 20, "source": f"doc{index // 5}.pdf"}
        for index in range(list_length * 3)
    ]
    lists = []
    for _ in range(list_count):
        chosen = generator.sample(pool, list_length)
        lists.append(
            [
                Document(
                    page_content=item["text"],
                    metadata={"source": item["source"], "score": 1.0 - rank / list_length},
                )
                for rank, item in enumerate(chosen)
            ]
        )
    return lists


def rrf_dumps_keyed(lists: Sequence[Sequence[Document]], k: int = 60) -> list[Document]:
    """The tutorials' RRF (ranks from 1 here, to compare like with like)."""
    scores: dict[str, float] = {}
    for documents in lists:
        for rank, document in enumerate(documents, start=1):
            key = dumps(
                Document(
                    page_content=document.page_content,
                    metadata={
                        name: value for name, value in document.metadata.items() if name != "score"
                    },
                )
            )
            scores[key] = scores.get(key, 0.0) + 1 / (k + rank)
    fused = []
    for key, score in sorted(scores.items(), key=lambda item: -item[1]):
        document = loads(key)
        document.metadata["fusion_score"] = score
        fused.append(document)
    return fused


def rrf_bare_loop(lists: Sequence[Sequence[Document]], k: int = 60) -> list[Document]:
    """A bare dict loop keyed by text, building new Documents with the fused score."""
    scores: dict[str, float] = {}
    first: dict[str, Document] = {}
    for documents in lists:
        for rank, document in enumerate(documents, start=1):
            key = document.page_content
            if key in scores:
                scores[key] += 1 / (k + rank)
            else:
                scores[key] = 1 / (k + rank)
                first[key] = document
    return [
        Document(
            page_content=first[key].page_content,
            metadata={**first[key].metadata, "fusion_score": score},
        )
        for key, score in sorted(scores.items(), key=lambda item: -item[1])
    ]


def time_once(function: Callable[[], object]) -> float:
    """CPU seconds of this process for one call: other jobs on a shared machine barely move it."""
    start = time.process_time()
    function()
    return time.process_time() - start


def compare(
    candidate: Callable[[], object], baseline: Callable[[], object], rounds: int
) -> tuple[float, float, float]:
    """Alternate the two calls; return (candidate median, baseline median, median ratio)."""
    for _ in range(3):
        candidate(), baseline()
    candidate_times, baseline_times = [], []
    for round_index in range(rounds):
        if round_index % 2:
            baseline_times.append(time_once(baseline))
            candidate_times.append(time_once(candidate))
        else:
            candidate_times.append(time_once(candidate))
            baseline_times.append(time_once(baseline))
    ratios = [c / b for c, b in zip(candidate_times, baseline_times, strict=True)]
    return (
        statistics.median(candidate_times),
        statistics.median(baseline_times),
        statistics.median(ratios),
    )


def check_same_output(lists: list[list[Document]]) -> None:
    kit = fusion.reciprocal_rank_fusion.invoke(lists)
    bare = rrf_bare_loop(lists)
    assert [d.page_content for d in kit] == [d.page_content for d in bare]
    assert all(
        abs(a.metadata["fusion_score"] - b.metadata["fusion_score"]) < 1e-12
        for a, b in zip(kit, bare, strict=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="store_true", help="5-20 lists x 4-1000 documents")
    parser.add_argument("--rounds", type=int, default=41)
    arguments = parser.parse_args()

    shapes = (
        [(lists, length) for lists in (5, 10, 20) for length in (4, 100, 1000)]
        if arguments.grid
        else [(10, 100)]
    )
    runnables = {
        "reciprocal_rank_fusion": fusion.reciprocal_rank_fusion,
        "relative_score_fusion": fusion.relative_score_fusion,
        "dist_based_score_fusion": fusion.dist_based_score_fusion,
        "unique_union": fusion.unique_union,
    }
    print(
        "| lists x docs | runnable (.invoke) | kit median | dumps-keyed median | kit / dumps "
        "| bare-loop median | kit / bare |"
    )
    print("|---|---|---|---|---|---|---|")
    for list_count, list_length in shapes:
        lists = make_lists(list_count, list_length)
        check_same_output(lists)
        for name, runnable in runnables.items():
            rounds = max(5, arguments.rounds if list_length <= 100 else arguments.rounds // 4)
            kit = partial(runnable.invoke, lists)
            kit_time, dumps_time, dumps_ratio = compare(
                kit, partial(rrf_dumps_keyed, lists), rounds
            )
            _, bare_time, bare_ratio = compare(kit, partial(rrf_bare_loop, lists), rounds)
            print(
                f"| {list_count} x {list_length} | {name} | {kit_time * 1e3:.3f} ms "
                f"| {dumps_time * 1e3:.3f} ms | {dumps_ratio:.3f} (x{1 / dumps_ratio:.1f} faster) "
                f"| {bare_time * 1e3:.3f} ms | {bare_ratio:.2f} |"
            )


if __name__ == "__main__":
    main()
