"""Fusion cost: the kit's fusions against LangChain's ``EnsembleRetriever.weighted_reciprocal_rank``.

Both fuse the same ranked lists (drawn from a pool twice a list's length, so documents recur
across lists as in hybrid search). The kit is called through ``.invoke`` (callbacks and all), for
the whole ranking and with ``top_n=10``; LangChain returns its inputs, the kit fresh copies with
``metadata["fusion_score"]``. Calls alternate in the same run; the table gives CPU-time medians and
the median of per-pair ratios. The last two columns time, against the same LangChain call, only
the fresh copies the kit returns (``scored_copies``: each a new Document given its own field dict, metadata
dict with the score and fields set, as pydantic's ``__copy__`` builds one) and only a bare
``__copy__`` of each (pydantic's own shallow copy, no new metadata).

    python benchmarks/bench_fusion.py                  # RRF, 2/4/8 lists x 10/100/1000 documents
    python benchmarks/bench_fusion.py --lists 4 --lengths 100 --rounds 2001 --all-fusions
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from functools import partial

from langchain_classic.retrievers import EnsembleRetriever
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda

from rag_fusion_chain import fusion
from rag_fusion_chain.fusion.algorithms import scored_copies


def make_lists(list_count: int, list_length: int, seed: int = 0) -> list[list[Document]]:
    """``list_count`` ranked lists of ``list_length`` documents from a pool of twice that many."""
    generator = random.Random(seed)
    pool = [
        Document(f"passage {index} " + "lorem ipsum " * 20, metadata={"source": f"doc{index}"})
        for index in range(2 * list_length)
    ]
    return [
        [
            Document(item.page_content, metadata={**item.metadata, "score": 1 - rank / list_length})
            for rank, item in enumerate(generator.sample(pool, list_length))
        ]
        for _ in range(list_count)
    ]


def cpu_time(function: Callable[[], object]) -> float:
    """CPU seconds of this process for one call (other jobs on a shared machine barely move it)."""
    start = time.process_time()
    function()
    return time.process_time() - start


def paired(candidate: Callable[[], object], baseline: Callable[[], object], rounds: int):
    """Alternate the calls; (candidate median, baseline median, median per-pair ratio)."""
    for _ in range(5):
        candidate(), baseline()
    pairs = []
    for round_index in range(rounds):
        if round_index % 2:
            base, kit = cpu_time(baseline), cpu_time(candidate)
        else:
            kit, base = cpu_time(candidate), cpu_time(baseline)
        pairs.append((kit, base))
    return (
        statistics.median(kit for kit, _ in pairs),
        statistics.median(base for _, base in pairs),
        statistics.median(kit / base for kit, base in pairs),
    )


def check_same_order(lists: list[list[Document]], ensemble: EnsembleRetriever) -> None:
    kit = [document.page_content for document in fusion.reciprocal_rank_fusion.invoke(lists)]
    assert kit == [document.page_content for document in ensemble.weighted_reciprocal_rank(lists)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lists", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=401, help="pairs per cell (1000 docs: /10)")
    parser.add_argument("--all-fusions", action="store_true", help="relative, dist, union too")
    arguments = parser.parse_args()
    print(
        "| fusion | lists x docs | fused | top_n | kit .invoke | EnsembleRetriever "
        "| kit / LangChain | its copies alone / LangChain | bare `__copy__` / LangChain |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    names = ["rrf", "relative", "dist", "union"] if arguments.all_fusions else ["rrf"]
    for list_count in arguments.lists:
        for list_length in arguments.lengths:
            lists = make_lists(list_count, list_length)
            unused = [RunnableLambda(lambda query: [])] * list_count  # only its fusion is called
            ensemble = EnsembleRetriever(retrievers=unused, weights=[1.0] * list_count)
            check_same_order(lists, ensemble)
            fused = fusion.reciprocal_rank_fusion.invoke(lists)
            rounds = max(21, arguments.rounds // (10 if list_length >= 1000 else 1))
            baseline = partial(ensemble.weighted_reciprocal_rank, lists)
            for name, top_n in [(name, top_n) for name in names for top_n in (None, 10)]:
                kit_fusion = fusion.FUSIONS[name](top_n=top_n)
                kit, base, ratio = paired(partial(kit_fusion.invoke, lists), baseline, rounds)
                kept = range(len(fused[:top_n]))
                scores = [0.5] * len(fused)
                copies = paired(partial(scored_copies, fused, scores, kept), baseline, rounds)
                bare = paired(
                    lambda kept=kept, fused=fused: [fused[i].__copy__() for i in kept],
                    baseline,
                    rounds,
                )
                print(
                    f"| {name} | {list_count} x {list_length} | {len(fused)} | {top_n or 'all'} "
                    f"| {kit * 1e3:.3f} ms | {base * 1e3:.3f} ms | **{ratio:.2f}** "
                    f"| {copies[2]:.2f} | {bare[2]:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
