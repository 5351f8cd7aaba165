"""Peak memory and CPU time of ``build_index`` (FAISS + BM25) with an instant 384-dimensional
embedder that hands numpy rows over, as the kit's own do: what the index machinery itself holds.

Run it on two checkouts to compare them (each run is one fresh process):

    PYTHONPATH=$PWD python benchmarks/bench_index_memory.py 50000
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from rag_fusion_chain.retrievers.index_directory import build_index

WORDS = [
    "heat",
    "pump",
    "solar",
    "wind",
    "battery",
    "grid",
    "storage",
    "panel",
    "turbine",
    "cost",
    "winter",
    "efficiency",
]


class InstantEmbeddings(Embeddings):
    """Random 384-dimensional rows as one float32 array (lists only when asked for lists)."""

    model_identity = "instant-fake-384"

    def embed_documents_array(self, texts: list[str]) -> Any:
        return np.random.default_rng(len(texts)).standard_normal((len(texts), 384), np.float32)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def write_corpus(folder: Path, chunks: int) -> None:
    """Markdown files of ten 30-word paragraphs each, one chunk a paragraph at chunk_size=60."""
    folder.mkdir()
    for number in range(chunks // 10):
        paragraphs = [
            " ".join(WORDS[(number + part + word) % len(WORDS)] for word in range(30))
            + f" file {number} part {part}."
            for part in range(10)
        ]
        (folder / f"f{number}.md").write_text("\n\n".join(paragraphs), encoding="utf-8")


def main() -> None:
    chunks = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    workdir = Path(tempfile.mkdtemp())
    write_corpus(workdir / "corpus", chunks)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.process_time()
    settings = build_index(
        [workdir / "corpus"],
        workdir / "index",
        embedding=InstantEmbeddings(),
        chunk_size=60,
        chunk_overlap=0,
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"chunks {settings['chunks']}: CPU {time.process_time() - started:.1f} s, "
        f"peak RSS {peak:.0f} MB (before the build {before:.0f} MB)"
    )


if __name__ == "__main__":
    main()
