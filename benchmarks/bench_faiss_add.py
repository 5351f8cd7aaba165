"""Adding one document to a loaded FAISS store: LangChain's ``InMemoryDocstore.add`` against the
kit's ``ColumnDocstore.add``, the same store loaded twice in one process. CPU time of the call and
the resident memory it added. Synthetic chunks, random 384-dimension vectors given precomputed.
Then the kit's weak corner: a batch of N documents given to the docstore of a 10-document store
(docstore ``add`` alone, median of 5; LangChain merges two dicts in C).

    python benchmarks/bench_faiss_add.py 100000 1000000      # results/scale.md
"""

from __future__ import annotations

import gc
import sys
import tempfile
import time
import warnings

import numpy as np
from langchain_community.docstore.in_memory import InMemoryDocstore
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from rag_fusion_chain.retrievers.stores import build_faiss, load_faiss


def resident_mb() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * 4096 // 2**20


def run(count: int) -> None:
    embeddings = DeterministicFakeEmbedding(size=384)
    folder = tempfile.mkdtemp()
    documents = [
        Document(f"passage number {i} about topic {i % 97} " * 4, id=f"d{i}", metadata={"n": i})
        for i in range(count)
    ]
    vectors = np.random.default_rng(0).standard_normal((count, 384)).astype("float32")
    build_faiss(documents, embeddings, folder, vectors=vectors)
    del documents, vectors
    for label in ("LangChain's `InMemoryDocstore.add`", "`ColumnDocstore.add`"):
        store = load_faiss(folder, embeddings)
        if label.startswith("LangChain"):
            store.docstore.add = InMemoryDocstore.add.__get__(store.docstore)  # type: ignore[method-assign]
        gc.collect()
        before, started = resident_mb(), time.process_time()
        store.add_documents([Document("one new passage", id="new")])
        spent = 1000 * (time.process_time() - started)
        print(
            f"| {count:,} | {label} | {spent:.0f} ms | +{resident_mb() - before} MB |", flush=True
        )
        del store


def batch_into_small(count: int) -> None:
    embeddings = DeterministicFakeEmbedding(size=16)
    folder = tempfile.mkdtemp()
    build_faiss([Document(f"passage {i}", id=f"d{i}") for i in range(10)], embeddings, folder)
    batch = {f"n{i}": Document(f"new passage {i}", id=f"n{i}") for i in range(count)}
    for label in ("LangChain's `InMemoryDocstore.add`", "`ColumnDocstore.add`"):
        times = []
        for _ in range(5):
            docstore = load_faiss(folder, embeddings).docstore
            add = InMemoryDocstore.add.__get__(docstore) if "LangChain" in label else docstore.add
            started = time.process_time()
            add(batch)
            times.append(1000 * (time.process_time() - started))
        print(f"| {count:,} added to 10 stored | {label} | {sorted(times)[2]:.1f} ms | |")


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    print("| N | add | CPU | memory added |\n|---|---|---|---|")
    for size in sys.argv[1:] or ["100000"]:
        run(int(size))
    for size in sys.argv[1:] or ["100000"]:
        batch_into_small(int(size))
