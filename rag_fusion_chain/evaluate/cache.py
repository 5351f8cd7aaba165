"""A disk cache of embeddings, so that re-running an evaluation skips encoding the corpus: one
``.npz`` shard (text hashes, float32 vectors; no pickle) per batch, written under a temporary name
and renamed, so an interrupted or concurrent run loses only its own batch."""

from __future__ import annotations

import hashlib
import io
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from rag_fusion_chain import models
from rag_fusion_chain.retrievers.signing import open_regular_file, write_new_file
from rag_fusion_chain.validation import KIT_CACHE, validate_count

DEFAULT_CACHE_DIR = KIT_CACHE / "embeddings"
"""In the kit's cache folder (:data:`~rag_fusion_chain.validation.KIT_CACHE`): outside checkouts."""


class CachedEmbeddings(Embeddings):
    """Embeddings cached on disk under the model's identity and precision (bf16 vectors are not
    f32's) and each text's hash: only unseen texts reach the model, one call per batch."""

    def __init__(
        self,
        embeddings: Embeddings,
        cache_dir: str | Path = DEFAULT_CACHE_DIR,
        *,
        batch_size: int = 256,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.embeddings = embeddings
        identity = models.embedding_identity(embeddings)
        if precision := models.embedding_precision(embeddings):
            identity += f"|precision={precision}"
        self.directory = Path(cache_dir) / hashlib.sha256(identity.encode()).hexdigest()[:24]
        self.batch_size = validate_count("batch_size", batch_size)
        self.on_progress = on_progress
        """Called as ``on_progress(embedded, texts)`` after each batch (cached texts count as done)."""
        self._vectors: dict[str, Any] = {}
        self._shards_read: set[str] = set()
        self._lock = threading.Lock()

    def _read_new_shards(self) -> None:
        """Load the shards written since the last look, by this process or another."""
        import numpy  # a dependency of ranx and matplotlib: the eval extra has it

        for path in sorted(self.directory.glob("*.npz")):
            if path.name not in self._shards_read:
                with open_regular_file(path) as file, numpy.load(file, allow_pickle=False) as shard:
                    if any(member.compress_type for member in shard.zip.infolist()):  # a zip bomb?
                        raise ValueError(f"{path} is compressed (the kit's are not); not read")
                    self._vectors.update(zip(shard["keys"].tolist(), shard["vectors"], strict=True))
                self._shards_read.add(path.name)

    def _write_shard(self, keys: list[str], vectors: Sequence[Sequence[float]]) -> None:
        import numpy

        array = numpy.asarray(vectors, dtype=numpy.float32)
        if array.shape[0] != len(keys):
            raise ValueError(f"the model returned {array.shape[0]} vectors for {len(keys)} texts")
        name, shard = f"{uuid.uuid4().hex}.npz", io.BytesIO()
        numpy.savez(shard, keys=numpy.asarray(keys), vectors=array)
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_new_file(self.directory / name, [shard.getvalue()])  # renamed when complete
            self._shards_read.add(name)
            self._vectors.update(zip(keys, array, strict=True))

    def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
        keys = [hashlib.sha256(f"{kind}\0{text}".encode()).hexdigest() for text in texts]
        with self._lock:
            self._read_new_shards()
            missing = {
                key: text for key, text in zip(keys, texts, strict=True) if key not in self._vectors
            }
        if kind == "query" and len(missing) == 1:
            ((key, text),) = missing.items()
            self._write_shard([key], [self.embeddings.embed_query(text)])
        else:
            pending = list(missing)
            for start in range(0, len(pending), self.batch_size):
                batch = pending[start : start + self.batch_size]
                vectors = self.embeddings.embed_documents([missing[key] for key in batch])
                self._write_shard(batch, vectors)
                if self.on_progress is not None:
                    self.on_progress(len(keys) - len(pending) + start + len(batch), len(keys))
        return [self._vectors[key].tolist() for key in keys]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents, encoding only those not in the cache."""
        return self._embed(list(texts), "document")

    def embed_query(self, text: str) -> list[float]:
        """Embed one query, from the cache when it was embedded before."""
        return self._embed([text], "query")[0]
