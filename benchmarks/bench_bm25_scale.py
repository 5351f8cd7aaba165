"""BM25 build + save and load: the kit's BM25Retriever against plain bm25s, same chunks, same run.

Chunks are SciFact sentences recombined into ~60-word passages. Plain bm25s: ``bm25s.tokenize``
(English stopwords, PyStemmer) + ``BM25.index`` + ``save`` (corpus included), then ``BM25.load``
with the corpus. Each case runs in a fresh subprocess (cold caches, its own peak RSS), repeats
interleaved; medians of the process's CPU time (``time.process_time``) are printed: on a
shared, loaded machine wall time mostly measures the scheduler.

    nice python benchmarks/bench_bm25_scale.py --sizes 10000 100000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CORPUS = Path(
    os.environ.get(
        "SCIFACT_CORPUS",
        Path(__file__).resolve().parents[1] / "../shared/data/scifact/corpus.jsonl",
    )
)
CASES = ("plain-build", "kit-build", "plain-load", "kit-load")


def passages(count: int) -> list[str]:
    sentences = []
    with CORPUS.open(encoding="utf-8") as lines:
        for line in lines:
            sentences.extend(json.loads(line)["text"].split(". "))
    generator = random.Random(0)
    return [" ".join(generator.sample(sentences, 3)) for _ in range(count)]


def case(name: str, count: int, directory: Path) -> dict[str, float]:
    """One timed case in this fresh process: seconds and peak RSS (MB)."""
    import bm25s
    import Stemmer
    from langchain_core.documents import Document

    from rag_fusion_chain.retrievers.bm25 import BM25Retriever

    if name == "kit-load":
        started = time.process_time()
        assert len(BM25Retriever.load(directory / "kit").documents) == count
    elif name == "plain-load":
        started = time.process_time()
        bm25s.BM25.load(str(directory / "plain"), load_corpus=True, show_progress=False)
    elif name == "kit-build":
        texts = passages(count)
        started = time.process_time()
        documents = [Document(text, id=str(number)) for number, text in enumerate(texts)]
        BM25Retriever.from_documents(documents).save(directory / "kit")
    else:
        texts = passages(count)
        started = time.process_time()
        tokens = bm25s.tokenize(
            texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False
        )
        index = bm25s.BM25()
        index.index(tokens, show_progress=False)
        index.save(str(directory / "plain"), corpus=texts, show_progress=False)
    seconds = time.process_time() - started
    return {"seconds": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_case(name: str, count: int, directory: Path) -> dict[str, float]:
    command = [
        sys.executable,
        __file__,
        "--case",
        name,
        "--sizes",
        str(count),
        "--dir",
        str(directory),
    ]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--case")
    parser.add_argument("--dir", type=Path)
    arguments = parser.parse_args()
    if arguments.case:
        print(json.dumps(case(arguments.case, arguments.sizes[0], arguments.dir)))
        return
    print("| N chunks | what | kit CPU s | plain CPU s | ratio | peak RSS kit / plain MB |")
    print("|---|---|---|---|---|---|")
    for count in arguments.sizes:
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in CASES}
        for _ in range(arguments.repeats):  # interleaved, so load changes hit both
            with tempfile.TemporaryDirectory() as scratch:
                for name in CASES:
                    runs[name].append(run_case(name, count, Path(scratch)))
        for what in ("build", "load"):
            kit, plain = (
                {
                    key: statistics.median(run[key] for run in runs[f"{side}-{what}"])
                    for key in ("seconds", "rss_mb")
                }
                for side in ("kit", "plain")
            )
            print(
                f"| {count:,} | {what}{' + save' if what == 'build' else ''} | {kit['seconds']:.2f} | "
                f"{plain['seconds']:.2f} | {kit['seconds'] / plain['seconds']:.2f}x | "
                f"{kit['rss_mb']:.0f} / {plain['rss_mb']:.0f} ({kit['rss_mb'] / plain['rss_mb']:.2f}x) |",
                flush=True,
            )


if __name__ == "__main__":
    main()
