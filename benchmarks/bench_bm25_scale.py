"""BM25 build + save + load: the kit's BM25Retriever against plain bm25s, same chunks, same run.

Chunks are SciFact sentences recombined into ~60-word passages. Plain bm25s: ``bm25s.tokenize``
(English stopwords, PyStemmer) + ``BM25.index`` + ``save`` (corpus included) + ``load``.

    nice python benchmarks/bench_bm25_scale.py --sizes 10000 100000
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import bm25s
import Stemmer
from langchain_core.documents import Document

from rag_fusion_chain.retrievers.bm25 import BM25Retriever

CORPUS = Path(__file__).resolve().parents[1] / "../shared/data/scifact/corpus.jsonl"


def passages(count: int) -> list[str]:
    sentences = []
    with CORPUS.open(encoding="utf-8") as lines:
        for line in lines:
            sentences.extend(json.loads(line)["text"].split(". "))
    generator = random.Random(0)
    return [" ".join(generator.sample(sentences, 3)) for _ in range(count)]


def kit(texts: list[str], directory: Path) -> None:
    documents = [Document(text, id=str(number)) for number, text in enumerate(texts)]
    BM25Retriever.from_documents(documents).save(directory)
    BM25Retriever.load(directory)


def plain(texts: list[str], directory: Path) -> None:
    tokens = bm25s.tokenize(
        texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False
    )
    index = bm25s.BM25()
    index.index(tokens, show_progress=False)
    index.save(str(directory), corpus=texts, show_progress=False)
    bm25s.BM25.load(str(directory), load_corpus=True, show_progress=False)


def timed(function, texts: list[str]) -> float:
    with tempfile.TemporaryDirectory() as directory:
        start = time.perf_counter()
        function(texts, Path(directory) / "bm25")
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    print("| N chunks | kit build+save+load s (median) | plain bm25s s | ratio |")
    print("|---|---|---|---|")
    for size in arguments.sizes:
        texts = passages(size)
        kit_times, plain_times = [], []
        for _ in range(arguments.repeats):  # interleaved, so load changes hit both
            kit_times.append(timed(kit, texts))
            plain_times.append(timed(plain, texts))
        kit_median, plain_median = statistics.median(kit_times), statistics.median(plain_times)
        print(
            f"| {size:,} | {kit_median:.2f} | {plain_median:.2f} | {kit_median / plain_median:.2f}x |"
        )


if __name__ == "__main__":
    main()
