"""FAISS build, load, approximate search and threads at scale: the kit against plain FAISS.

Synthetic chunks (about 200 characters each) with precomputed 384-dimensional vectors drawn
around 1,000 random centres (unit-normalised), so approximate indexes see clustered data as
real embeddings are. Every timed case runs in a fresh subprocess, so its peak RSS is its own.

* build: ``build_faiss(documents, embeddings, vectors=V)`` vs ``IndexFlatIP().add(V)``;
* load: ``load_faiss`` (signature + SHA-256 + docstore.json) vs ``faiss.read_index`` plus
  ``json.load`` of the texts;
* search: recall@10 of HNSW against flat, five-query p50 through ``VectorRetriever`` (flat,
  HNSW at several efSearch), and flat search on the default OpenMP threads vs the kit's policy.

    nice python benchmarks/bench_scale.py --sizes 10000 100000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DIMENSION = 384
WORDS = [
    "solar",
    "wind",
    "battery",
    "heat",
    "pump",
    "grid",
    "storage",
    "turbine",
    "panel",
    "current",
    "voltage",
    "energy",
]


def vectors(count: int, seed: int = 0) -> np.ndarray:
    generator = np.random.default_rng(seed)
    centres = generator.standard_normal((1000, DIMENSION), dtype=np.float32)
    rows = centres[generator.integers(0, 1000, count)]
    rows += 0.6 * generator.standard_normal((count, DIMENSION), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def texts(count: int) -> list[str]:
    return [
        f"chunk {n}: " + " ".join(WORDS[(n + k) % len(WORDS)] for k in range(30))
        for n in range(count)
    ]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def embeddings() -> Any:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    return DeterministicFakeEmbedding(size=DIMENSION)


def case(name: str, count: int, directory: Path) -> dict[str, float]:
    """One timed case in this (fresh) process: seconds and peak RSS."""
    import faiss
    from langchain_core.documents import Document

    from rag_fusion_chain.retrievers.stores import build_faiss, faiss_store_class, load_faiss

    faiss_store_class()  # imports langchain_community outside the timings
    if name == "kit-load":
        started = time.perf_counter()
        store = load_faiss(directory / "kit", embeddings())
        seconds = time.perf_counter() - started
        assert store.index.ntotal == count
        return {"seconds": seconds, "rss_mb": peak_rss_mb()}
    if name == "plain-load":
        started = time.perf_counter()
        index = faiss.read_index(str(directory / "plain.faiss"))
        with open(directory / "plain.json", encoding="utf-8") as handle:
            loaded = json.load(handle)
        seconds = time.perf_counter() - started
        assert index.ntotal == len(loaded) == count
        return {"seconds": seconds, "rss_mb": peak_rss_mb()}
    matrix = vectors(count)
    chunks = texts(count)
    if name == "plain-build":
        started = time.perf_counter()
        index = faiss.IndexFlatIP(DIMENSION)
        index.add(matrix)
        seconds = time.perf_counter() - started
        faiss.write_index(index, str(directory / "plain.faiss"))
        with open(directory / "plain.json", "w", encoding="utf-8") as handle:
            json.dump(chunks, handle)
        return {"seconds": seconds, "rss_mb": peak_rss_mb()}
    documents = [
        Document(text, id=f"c{n}", metadata={"source": "s.md"}) for n, text in enumerate(chunks)
    ]
    del chunks
    started = time.perf_counter()
    store = build_faiss(documents, embeddings(), vectors=matrix)
    seconds = time.perf_counter() - started
    saving = time.perf_counter()
    from rag_fusion_chain.retrievers.faiss_files import save_faiss

    save_faiss(store, directory / "kit")
    return {
        "seconds": seconds,
        "save_seconds": time.perf_counter() - saving,
        "rss_mb": peak_rss_mb(),
    }


def run_case(name: str, count: int, directory: Path) -> dict[str, float]:
    output = subprocess.run(
        [sys.executable, __file__, "--case", name, "--sizes", str(count), "--dir", str(directory)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def p50(function: Any, repeats: int = 15) -> float:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1000


def search_table(count: int) -> list[str]:
    """Recall@10 of HNSW vs flat and five-query p50 latency; threads default vs policy."""
    import faiss
    from langchain_core.documents import Document

    from rag_fusion_chain.retrievers.stores import VectorRetriever, build_faiss

    default_threads = faiss.omp_get_max_threads()
    matrix = vectors(count)
    documents = [Document(f"c{n}", id=f"c{n}") for n in range(count)]
    queries = vectors(100, seed=7)
    flat = build_faiss(documents, embeddings(), vectors=matrix)
    started = time.perf_counter()
    hnsw = build_faiss(documents, embeddings(), vectors=matrix, index="hnsw")
    hnsw_build = time.perf_counter() - started
    rows = [f"| {count:,} | HNSW32 build | {hnsw_build:.1f} s | | | |"]
    exact = VectorRetriever(vectorstore=flat)
    truth = [{hit.id for hit in hits} for hits in exact.search_vectors(queries, 10)]
    five = queries[:5]
    flat_p50 = p50(lambda: exact.search_vectors(five, 10))
    rows.append(
        f"| {count:,} | flat, five queries, 1 thread | 1.000 | {flat_p50:.2f} ms | 1.00 | |"
    )
    for ef in (32, 64, 128, 256):
        retriever = VectorRetriever(vectorstore=hnsw, search_parameters={"efSearch": ef})
        found = retriever.search_vectors(queries, 10)
        recall = statistics.mean(
            len(truth_ids & {hit.id for hit in hits}) / 10
            for truth_ids, hits in zip(truth, found, strict=True)
        )
        latency = p50(lambda retriever=retriever: retriever.search_vectors(five, 10))
        rows.append(
            f"| {count:,} | HNSW efSearch={ef}, five queries | {recall:.3f} | {latency:.2f} ms | "
            f"{latency / flat_p50:.3f} | |"
        )
    policy = p50(lambda: exact.search_vectors(five, 10))
    unbounded = VectorRetriever(vectorstore=flat, faiss_threads=default_threads)
    loose = p50(lambda: unbounded.search_vectors(five, 10))
    rows.append(
        f"| {count:,} | flat five queries: {unbounded.faiss_threads} threads (FAISS default "
        f"{default_threads}) vs policy 1 | | {loose:.2f} vs {policy:.2f} ms | {loose / policy:.2f} | |"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--search-sizes", type=int, nargs="*", default=[100_000])
    parser.add_argument("--case")
    parser.add_argument("--dir", type=Path)
    arguments = parser.parse_args()
    if arguments.case:
        print(json.dumps(case(arguments.case, arguments.sizes[0], arguments.dir)))
        return
    print("| N | what | kit | plain | ratio | peak RSS kit / plain |")
    print("|---|---|---|---|---|---|")
    for count in arguments.sizes:
        with tempfile.TemporaryDirectory() as scratch:
            directory = Path(scratch)
            results = {
                name: run_case(name, count, directory)
                for name in ("plain-build", "kit-build", "plain-load", "kit-load")
            }
            for what in ("build", "load"):
                kit, plain = results[f"kit-{what}"], results[f"plain-{what}"]
                print(
                    f"| {count:,} | {what} | {kit['seconds']:.2f} s | {plain['seconds']:.2f} s | "
                    f"{kit['seconds'] / plain['seconds']:.2f}x | {kit['rss_mb']:.0f} / "
                    f"{plain['rss_mb']:.0f} MB ({kit['rss_mb'] / plain['rss_mb']:.2f}x) |",
                    flush=True,
                )
            print(
                f"| {count:,} | kit save (index.faiss + docstore.json + manifest) | {results['kit-build']['save_seconds']:.2f} s | | | |",
                flush=True,
            )
    print()
    print("| N | what | recall@10 vs flat | p50 | vs flat | |")
    print("|---|---|---|---|---|---|")
    for count in arguments.search_sizes:
        for row in search_table(count):
            print(row, flush=True)


if __name__ == "__main__":
    main()
