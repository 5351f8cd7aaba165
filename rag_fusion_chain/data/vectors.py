"""The sample corpus's MiniLM vectors, shipped as a float32 ``.npy`` (no pickle) with a JSON record
of what made them, so serving and the demo start in seconds when :func:`vectors_fit` accepts the
embeddings. Regenerate them with ``python -m rag_fusion_chain.data.vectors``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings

from rag_fusion_chain import models
from rag_fusion_chain.data import data_path, sample_corpus_path

if TYPE_CHECKING:
    import numpy as np

VECTORS_FILE = "scifact_sample_vectors.npy"
RECORD_FILE = "scifact_sample_vectors.json"
RECORD_FORMAT = "rag_fusion_chain.sample_vectors"
RECORD_FORMAT_VERSION = 1


@dataclass(frozen=True)
class SampleVectors:
    """Shipped vectors (``matrix``, one row per document) and the record of what made them."""

    matrix: np.ndarray
    record: dict[str, Any]

    def by_text(self, texts: Sequence[str]) -> dict[str, Sequence[float]]:
        """Each corpus text (``texts`` in corpus order) mapped to its row."""
        if len(texts) != len(self.matrix):
            raise ValueError(f"texts: {len(texts)} corpus texts for {len(self.matrix)} vectors")
        return dict(zip(texts, self.matrix, strict=True))


def load_sample_vectors() -> SampleVectors:
    """The shipped vectors, checked against their record and the corpus (ValueError if not)."""
    import numpy as np

    folder = data_path("")
    record = json.loads((folder / RECORD_FILE).read_text("utf-8"))
    version = record.get("format_version")
    if record.get("format") != RECORD_FORMAT or version != RECORD_FORMAT_VERSION:
        wanted = f"a {RECORD_FORMAT} record (version {RECORD_FORMAT_VERSION})"
        raise ValueError(f"{folder / RECORD_FILE} is not {wanted}")
    matrix = np.load(folder / VECTORS_FILE, allow_pickle=False)
    expected = (len(record["document_ids"]), record["dimension"])
    if matrix.dtype != np.float32 or matrix.shape != expected:
        raise ValueError(
            f"{folder / VECTORS_FILE}: {matrix.dtype} {matrix.shape}, the record says "
            f"float32 {expected}"
        )
    if record["corpus_sha256"] != hashlib.sha256(sample_corpus_path().read_bytes()).hexdigest():
        raise ValueError("the shipped vectors were made from another version of the sample corpus")
    return SampleVectors(matrix=matrix, record=record)


def vectors_fit(record: dict[str, Any], embeddings: Embeddings) -> bool:
    """Whether ``record``'s vectors may be searched with ``embeddings`` (``backends_agree``)."""
    built = record.get("embedding_identity")
    return isinstance(built, str) and models.backends_agree(built, embeddings)


def write_sample_vectors(embedding: str | None = None, directory: Path | None = None) -> Path:
    """Embed the sample corpus with ``embedding`` (default MiniLM) and write the shipped files."""
    import numpy as np

    from rag_fusion_chain import ingest

    folder = directory or data_path("")
    documents = ingest.load([sample_corpus_path()])
    embeddings = models.embeddings(embedding)
    texts = [document.page_content for document in documents]
    matrix = models.embed_documents_array(embeddings, texts)
    record = {
        "format": RECORD_FORMAT,
        "format_version": RECORD_FORMAT_VERSION,
        "embedding": embedding or models.DEFAULT_EMBEDDING,
        "embedding_identity": models.embedding_identity(embeddings),
        "backend": models.split_backend(models.embedding_identity(embeddings))[1],
        "dimension": int(matrix.shape[1]),
        "corpus_sha256": hashlib.sha256(sample_corpus_path().read_bytes()).hexdigest(),
        "document_ids": [document.metadata["doc_id"] for document in documents],
    }
    np.save(folder / VECTORS_FILE, matrix, allow_pickle=False)
    (folder / RECORD_FILE).write_text(json.dumps(record, indent=1) + "\n", "utf-8")
    return folder / VECTORS_FILE


if __name__ == "__main__":
    print(write_sample_vectors())
