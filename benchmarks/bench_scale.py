"""FAISS build, save, load and approximate search at scale: the kit against plain FAISS.

Vectors have the structure of real embeddings: 4,096 centres, each the normalised sum of two of
the shipped SciFact MiniLM vectors (``rag_fusion_chain/data``), and every row a centre plus
Gaussian noise of norm ``--noise``, renormalised. Chunks are ~200-character synthetic texts
(SciFact sentences for the hybrid search). Every build/load case runs in a fresh subprocess
(``OMP_NUM_THREADS=1``), so its peak RSS is its own; repeats are interleaved, medians printed.
Times are the process's CPU time (``time.process_time``, all threads): on a shared, loaded machine
wall time mostly measures the scheduler.

* build: ``build_faiss(documents, embeddings, vectors=V)`` vs ``IndexFlatIP(d).add(V)``;
  + save: ``save_faiss`` vs ``faiss.write_index`` + ``json.dump`` of the texts (and, a second
  baseline, of the same ids, texts and metadata the kit stores);
* load: ``load_faiss`` (signature, BLAKE3 of the bytes read) vs ``faiss.read_index`` +
  ``json.load`` of either;
* search: recall@10 of the kit's HNSW against flat over 200 held-out queries, five-query p50
  through ``VectorRetriever`` and through ``hybrid_retriever`` (BM25 + vectors).

    nice python benchmarks/bench_scale.py --sizes 10000 100000 --search-sizes 100000
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
from langchain_core.embeddings import Embeddings

CENTRES = 4096
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
CASES = ("plain-build", "kit-build", "plain-load", "kit-load")


def vectors(count: int, seed: int = 0, noise: float = 0.5) -> np.ndarray:
    """``count`` unit rows around centres made of the shipped MiniLM vectors (see the module)."""
    from rag_fusion_chain.data.vectors import load_sample_vectors

    sample = load_sample_vectors().matrix
    centres_generator = np.random.default_rng(1234)
    pairs = centres_generator.integers(0, len(sample), (CENTRES, 2))
    centres = sample[pairs[:, 0]] + sample[pairs[:, 1]]
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    generator = np.random.default_rng(seed)
    rows = centres[generator.integers(0, CENTRES, count)]
    scale = noise / np.sqrt(sample.shape[1])
    for start in range(0, count, 65_536):
        block = rows[start : start + 65_536]
        block += scale * generator.standard_normal(block.shape, dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
    return rows


def texts(count: int) -> list[str]:
    return [
        f"chunk {n}: " + " ".join(WORDS[(n + k) % len(WORDS)] for k in range(30))
        for n in range(count)
    ]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class QueryVectors(Embeddings):
    """Query texts to precomputed vectors (queries in the data's distribution)."""

    def __init__(self, by_text: dict[str, np.ndarray]) -> None:
        self.by_text = by_text

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.by_text[text].tolist() for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.by_text[text].tolist()


def case(name: str, count: int, directory: Path, noise: float) -> dict[str, float]:
    """One timed case in this (fresh) process: seconds and peak RSS."""
    import faiss
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from rag_fusion_chain.retrievers.faiss_files import faiss_store_class
    from rag_fusion_chain.retrievers.stores import build_faiss, load_faiss, save_faiss

    faiss_store_class()  # both sides import their libraries before the clock starts
    embeddings = DeterministicFakeEmbedding(size=384)
    # Both sides keep what they loaded until the clock stops (freeing it is not loading).
    if name == "kit-load":
        started = time.process_time()
        store = load_faiss(directory / "kit", embeddings)
        seconds = time.process_time() - started
        assert store.index.ntotal == count
        return {"seconds": seconds, "rss_mb": peak_rss_mb()}
    if name == "plain-load":
        started = time.process_time()
        index = faiss.read_index(str(directory / "plain.faiss"))
        indexed = time.process_time()
        with open(directory / "columns.json", encoding="utf-8") as handle:
            columns = json.load(handle)
        full = time.process_time() - started
        texts_started = time.process_time()
        with open(directory / "plain.json", encoding="utf-8") as handle:
            chunks = json.load(handle)
        texts_only = indexed - started + time.process_time() - texts_started
        assert index.ntotal == len(columns["ids"]) == len(chunks) == count
        return {"seconds": texts_only, "full_seconds": full, "rss_mb": peak_rss_mb()}
    matrix, chunks = vectors(count, noise=noise), texts(count)
    if name == "plain-build":
        started = time.process_time()
        index = faiss.IndexFlatIP(matrix.shape[1])
        index.add(matrix)
        added = time.process_time()
        faiss.write_index(index, str(directory / "plain.faiss"))
        built = time.process_time()
        with open(directory / "plain.json", "w", encoding="utf-8") as handle:
            json.dump(chunks, handle)
        texts_saved = time.process_time()
        columns = {"ids": [f"c{n}" for n in range(count)], "texts": chunks}
        columns["metadatas"] = [{"source": "s.md"} for _ in range(count)]
        with open(directory / "columns.json", "w", encoding="utf-8") as handle:
            json.dump(columns, handle, ensure_ascii=False, separators=(",", ":"))
        return {
            "seconds": added - started,
            "saved_seconds": texts_saved - started,
            "saved_full_seconds": built - started + time.process_time() - texts_saved,
            "rss_mb": peak_rss_mb(),
        }
    documents = [
        Document(text, id=f"c{n}", metadata={"source": "s.md"}) for n, text in enumerate(chunks)
    ]
    del chunks
    started = time.process_time()
    store = build_faiss(documents, embeddings, vectors=matrix)
    built = time.process_time()
    save_faiss(store, directory / "kit")
    saved = time.process_time() - started
    return {
        "seconds": built - started,
        "saved_seconds": saved,
        "saved_full_seconds": saved,
        "rss_mb": peak_rss_mb(),
    }


def run_case(name: str, count: int, directory: Path, noise: float) -> dict[str, float]:
    command = [sys.executable, __file__, "--case", name, "--sizes", str(count)]
    command += ["--dir", str(directory), "--noise", str(noise)]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    output = subprocess.run(command, check=True, capture_output=True, text=True, env=environment)
    return json.loads(output.stdout.strip().splitlines()[-1])


def build_load_rows(count: int, repeats: int, noise: float) -> list[str]:
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in CASES}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as scratch:
            for name in CASES:
                runs[name].append(run_case(name, count, Path(scratch), noise))

    def median(name: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[name])

    rows = []
    for what, key, plain_what in (
        ("build", "seconds", "`IndexFlatIP.add`"),
        ("build + save", "saved_seconds", "add + `write_index` + `json.dump` texts"),
        ("build + save", "saved_full_seconds", "the same + `json.dump` ids, texts, metadata"),
        ("load", "seconds", "`read_index` + `json.load` texts"),
        ("load", "full_seconds", "`read_index` + `json.load` ids, texts, metadata"),
    ):
        side = "build" if what.startswith("build") else "load"
        kit_key = "seconds" if side == "load" else key
        kit, plain = median(f"kit-{side}", kit_key), median(f"plain-{side}", key)
        kit_rss, plain_rss = median(f"kit-{side}", "rss_mb"), median(f"plain-{side}", "rss_mb")
        rows.append(
            f"| {count:,} | {what} (plain: {plain_what}) | {kit:.3f} s | {plain:.3f} s | "
            f"{kit / plain:.2f}x | {kit_rss:.0f} / {plain_rss:.0f} MB ({kit_rss / plain_rss:.2f}x) |"
        )
    return rows


def p50_ms(function: Any, repeats: int = 15) -> float:
    timings = []
    for _ in range(repeats):
        started = time.process_time()
        function()
        timings.append(time.process_time() - started)
    return statistics.median(timings) * 1000


def search_rows(count: int, noise: float, efs: list[int], backend: str) -> list[str]:
    """Recall@10 of HNSW vs flat, five-query p50 for vectors alone and hybrid, on one thread."""
    from bench_bm25_scale import passages
    from langchain_core.documents import Document

    from rag_fusion_chain.retrievers.bm25 import BM25Retriever
    from rag_fusion_chain.retrievers.hybrid import hybrid_retriever
    from rag_fusion_chain.retrievers.stores import FAISS_INDEXES, VectorRetriever, build_faiss

    matrix = vectors(count, noise=noise)
    query_matrix = vectors(200, seed=7, noise=noise)
    documents = [Document(text, id=f"c{n}") for n, text in enumerate(passages(count))]
    questions = [f"q{n}" for n in range(len(query_matrix))]
    embeddings = QueryVectors(dict(zip(questions, query_matrix, strict=True)))
    started = time.process_time()
    bm25 = BM25Retriever.from_documents(documents, k=100, backend=backend)
    bm25.invoke("warm up")  # numba compiles once per process
    rows = [
        f"| {count:,} | BM25 build (SciFact passages) | | {time.process_time() - started:.1f} s | |"
    ]
    flat = build_faiss(documents, embeddings, vectors=matrix)
    started = time.process_time()
    hnsw = build_faiss(documents, embeddings, vectors=matrix, index="hnsw")
    rows.append(
        f"| {count:,} | {FAISS_INDEXES['hnsw']} build, CPU | | {time.process_time() - started:.1f} s | |"
    )
    del matrix
    exact = VectorRetriever(vectorstore=flat, k=10)
    truth = [{hit.id for hit in hits} for hits in exact.search_vectors(query_matrix, 10)]
    five = questions[:5]
    flat_ms = p50_ms(lambda: exact.batch(five))
    flat_hybrid = hybrid_retriever(bm25, exact, k=10)
    flat_hybrid_ms = p50_ms(lambda: flat_hybrid.batch(five))
    rows.append(
        f"| {count:,} | flat | 1.000 | {flat_ms:.1f} ms | 1.00 | {flat_hybrid_ms:.1f} ms | 1.00 |"
    )
    for ef in efs:
        approximate = VectorRetriever(vectorstore=hnsw, k=10, search_parameters={"efSearch": ef})
        found = approximate.search_vectors(query_matrix, 10)
        recall = statistics.mean(
            len(expected & {hit.id for hit in hits}) / 10
            for expected, hits in zip(truth, found, strict=True)
        )
        vector_ms = p50_ms(lambda retriever=approximate: retriever.batch(five))
        hybrid = hybrid_retriever(bm25, approximate, k=10)
        hybrid_ms = p50_ms(lambda retriever=hybrid: retriever.batch(five))
        rows.append(
            f"| {count:,} | HNSW efSearch={ef} | {recall:.3f} | {vector_ms:.2f} ms | "
            f"{vector_ms / flat_ms:.3f} | {hybrid_ms:.1f} ms | {hybrid_ms / flat_hybrid_ms:.3f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--search-sizes", type=int, nargs="*", default=[100_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--ef", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--bm25-backend", choices=["numpy", "numba"], default="numpy")
    parser.add_argument("--case")
    parser.add_argument("--dir", type=Path)
    arguments = parser.parse_args()
    if arguments.case:
        result = case(arguments.case, arguments.sizes[0], arguments.dir, arguments.noise)
        print(json.dumps(result))
        return
    print("load average", *(f"{load:.2f}" for load in os.getloadavg()))
    if arguments.sizes:
        print("| N | what | kit CPU | plain CPU | ratio | peak RSS kit / plain |")
        print("|---|---|---|---|---|---|")
    for count in arguments.sizes:
        for row in build_load_rows(
            count, arguments.repeats if count < 1_000_000 else 1, arguments.noise
        ):
            print(row, flush=True)
    if arguments.search_sizes:
        print(
            "\n| N | index | recall@10 vs flat | five queries, vectors, p50 CPU | vs flat | "
            "five queries, hybrid, p50 CPU | vs flat |"
        )
        print("|---|---|---|---|---|---|---|")
    for count in arguments.search_sizes:
        for row in search_rows(count, arguments.noise, arguments.ef, arguments.bm25_backend):
            print(row, flush=True)
    print("load average", *(f"{load:.2f}" for load in os.getloadavg()))


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent)]  # this checkout's kit, not an installed one
    os.environ.setdefault("RAG_FUSION_FAISS_THREADS", "1")
    main()
