"""Adding one document to a loaded FAISS store: LangChain's ``InMemoryDocstore.add`` against the
kit's ``ColumnDocstore.add``, the same store loaded twice in one process. CPU time of the call and
the resident memory it added. Synthetic chunks, random 384-dimension vectors given precomputed.

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


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    print("| N | add | CPU | memory added |\n|---|---|---|---|")
    for size in sys.argv[1:] or ["100000"]:
        run(int(size))
