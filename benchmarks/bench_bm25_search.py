"""BM25 search at scale: the kit's ``BM25Retriever.batch`` of five queries against plain bm25s.

The index (SciFact sentences recombined into passages, as ``bench_bm25_scale.py``) is built once
and saved under ``--dir``, then loaded by later runs. Same process, same token ids, interleaved
rounds, medians of the process's CPU time per five-query batch:

* kit: ``BM25Retriever.batch`` (tokenising, scoring, top-k, a ``Document`` per hit);
* bm25s: ``BM25.retrieve(token_ids, k)`` on the same index (numpy backend), what the kit called
  before; its top-k is ``np.argpartition`` over every document's score.

Queries: the five ``bench_scale.py`` hybrid queries (``q0``..``q4``, one of them a rare term) and
the first five SciFact claims (common terms). The kit's hits must equal bm25s's (scores exactly,
documents where the score is not tied).

    nice python benchmarks/bench_bm25_search.py --size 1000000 --dir /tmp/bm25-1m
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench_bm25_scale import CORPUS, passages


def timed(function: Any, rounds: list[float]) -> None:
    """Appends the CPU milliseconds of one call of ``function`` to ``rounds``."""
    started = time.process_time()
    function()
    rounds.append((time.process_time() - started) * 1000)


def same_hits(kit: list[Any], plain: tuple[Any, Any], row: int) -> bool:
    """The kit's hits are bm25s's positive ones: same scores, same ids where not tied."""
    scores = [float(score) for score in plain[1][row] if score > 0]
    got = [document.metadata["score"] for document in kit]
    untied = [scores.count(score) == 1 for score in scores]
    expected = [f"c{int(index)}" for index in plain[0][row][: len(scores)]]
    ids_agree = all(
        ok <= (document.id == want)
        for ok, document, want in zip(untied, kit, expected, strict=True)
    )
    return got == scores and ids_agree


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("-k", type=int, default=100)
    arguments = parser.parse_args()
    from langchain_core.documents import Document

    from rag_fusion_chain.retrievers.bm25 import BM25Retriever

    if not (arguments.dir / "retriever.json").is_file():
        texts = passages(arguments.size)
        documents = [Document(text, id=f"c{n}") for n, text in enumerate(texts)]
        BM25Retriever.from_documents(documents).save(arguments.dir)
    retriever = BM25Retriever.load(arguments.dir, k=arguments.k)
    assert len(retriever.documents) == arguments.size
    claims_file = CORPUS.parent / "queries.jsonl"
    with claims_file.open(encoding="utf-8") as lines:
        claims = [json.loads(line)["text"] for line, _ in zip(lines, range(5), strict=False)]
    print("load average", *(f"{load:.2f}" for load in os.getloadavg()))
    print("| N | queries | kit five-query p50 CPU | bm25s `retrieve` p50 CPU | kit / bm25s |")
    print("|---|---|---|---|---|")
    for name, queries in (
        ("bench_scale q0..q4", [f"q{n}" for n in range(5)]),
        ("SciFact claims", claims),
    ):
        vocabulary = retriever.index.vocab_dict
        token_ids = [
            [vocabulary[t] for t in retriever._terms(q) if t in vocabulary] for q in queries
        ]
        asked = [ids for ids in token_ids if ids]

        def plain(asked: list[list[int]] = asked) -> Any:
            return retriever.index.retrieve(asked, k=arguments.k, show_progress=False)

        expected, found = plain(), retriever.batch(queries)
        rows = [row for row, ids in enumerate(token_ids) if ids]
        assert all(same_hits(found[row], expected, n) for n, row in enumerate(rows)), name
        kit_ms: list[float] = []
        plain_ms: list[float] = []
        for _ in range(arguments.rounds):
            timed(lambda queries=queries: retriever.batch(queries), kit_ms)
            timed(plain, plain_ms)
        kit, bm25s = statistics.median(kit_ms), statistics.median(plain_ms)
        print(
            f"| {arguments.size:,} | {name} ({len(asked)} with known terms) | {kit:.1f} ms | "
            f"{bm25s:.1f} ms | {kit / bm25s:.3f} |"
        )
    print("load average", *(f"{load:.2f}" for load in os.getloadavg()))


if __name__ == "__main__":
    main()
