"""A disk cache of embeddings, so that re-running an evaluation skips encoding the corpus.

Vectors live under ``<cache_dir>/<hash of model identity>/`` as float32 ``.npy`` shards (loaded
with ``allow_pickle=False``: nothing is pickled) plus ``index.json`` mapping a text hash to
``[shard, row]``. A writer adds a shard and replaces the index atomically, so an interrupted or
concurrent run loses at most its own new entries.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

DEFAULT_CACHE_DIR = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "rag-fusion-chain"
    / "embeddings"
)
"""``$XDG_CACHE_HOME`` (else ``~/.cache``)``/rag-fusion-chain/embeddings``: shared between
checkouts, never committed."""
INDEX_FILE = "index.json"


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as error:
        raise ImportError(
            'the embedding cache needs numpy: pip install "rag-fusion-chain[eval]"'
        ) from error
    return numpy


def text_key(text: str, kind: str) -> str:
    """The cache key of a text: sha256 over its kind (``document``/``query``) and the text."""
    return hashlib.sha256(f"{kind}\0{text}".encode()).hexdigest()


class EmbeddingStore:
    """Vectors of one embedding model on disk, looked up by :func:`text_key` (thread-safe)."""

    def __init__(self, cache_dir: str | Path, identity: str) -> None:
        if not identity:
            raise ValueError("identity must name the embedding model (e.g. its name and revision)")
        self.identity = identity
        self.directory = Path(cache_dir) / hashlib.sha256(identity.encode()).hexdigest()[:24]
        self._entries = self._read_index()
        self._shards: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _read_index(self) -> dict[str, tuple[str, int]]:
        path = self.directory / INDEX_FILE
        if not path.is_file():
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("identity") != self.identity:
            raise ValueError(
                f"{path} belongs to model {data.get('identity')!r}, not {self.identity!r}"
            )
        return {key: (shard, int(row)) for key, (shard, row) in data["entries"].items()}

    def get_many(self, keys: Sequence[str]) -> dict[str, list[float]]:
        """The cached vectors among ``keys`` (missing keys are absent)."""
        numpy = _numpy()
        found: dict[str, list[float]] = {}
        with self._lock:
            for key in keys:
                if (location := self._entries.get(key)) is None:
                    continue
                shard, row = location
                if shard not in self._shards:
                    path = self.directory / shard
                    self._shards[shard] = numpy.load(path, mmap_mode="r", allow_pickle=False)
                found[key] = [float(value) for value in self._shards[shard][row]]
        return found

    def put_many(self, keys: Sequence[str], vectors: Sequence[Sequence[float]]) -> None:
        """Store new vectors as one shard and merge them into the index on disk."""
        if len(keys) != len(vectors):
            raise ValueError(f"got {len(keys)} keys for {len(vectors)} vectors")
        if not keys:
            return
        numpy = _numpy()
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            shard = f"shard-{uuid.uuid4().hex}.npy"
            temporary_shard = self.directory / f".{shard}.tmp"
            with temporary_shard.open("wb") as handle:
                numpy.save(handle, numpy.asarray(vectors, dtype=numpy.float32), allow_pickle=False)
            os.replace(temporary_shard, self.directory / shard)
            entries = {**self._read_index(), **self._entries}
            entries.update({key: (shard, row) for row, key in enumerate(keys)})
            payload = {
                "identity": self.identity,
                "entries": {k: list(v) for k, v in entries.items()},
            }
            handle_number, temporary = tempfile.mkstemp(dir=self.directory, suffix=".json.tmp")
            with os.fdopen(handle_number, "w", encoding="utf-8") as index_handle:
                json.dump(payload, index_handle)
            os.replace(temporary, self.directory / INDEX_FILE)
            self._entries = entries


class CachedEmbeddings(Embeddings):
    """An Embeddings model with an on-disk cache keyed by model identity and text hash: only
    unseen texts reach the model, one ``embed_documents`` call per batch. ``identity`` must change
    whenever the vectors would (model name, revision, normalisation).

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> import tempfile
    >>> cached = CachedEmbeddings(DeterministicFakeEmbedding(size=4), "fake-4", tempfile.mkdtemp())
    >>> cached.embed_documents(["a", "b"]) == cached.embed_documents(["a", "b"])
    True
    """

    def __init__(
        self,
        embeddings: Embeddings,
        identity: str,
        cache_dir: str | Path = DEFAULT_CACHE_DIR,
        *,
        batch_size: int = 256,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.embeddings = embeddings
        self.store = EmbeddingStore(cache_dir, identity)
        self.batch_size = batch_size
        self.on_progress = on_progress
        """Called as ``on_progress(embedded, texts)`` after each batch (cached texts count as done)."""

    def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
        keys = [text_key(text, kind) for text in texts]
        found = self.store.get_many(keys)
        missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in found}
        if kind == "query" and len(missing) == 1:
            key, text = next(iter(missing.items()))
            self.store.put_many([key], [self.embeddings.embed_query(text)])
        else:
            pending = list(missing)
            for start in range(0, len(pending), self.batch_size):
                batch = pending[start : start + self.batch_size]
                self.store.put_many(
                    batch, self.embeddings.embed_documents([missing[key] for key in batch])
                )
                if self.on_progress is not None:
                    self.on_progress(len(keys) - len(pending) + start + len(batch), len(keys))
        found.update(self.store.get_many(list(missing)))
        return [found[key] for key in keys]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents, encoding only those not in the cache."""
        return self._embed(list(texts), "document")

    def embed_query(self, text: str) -> list[float]:
        """Embed one query, from the cache when it was embedded before."""
        return self._embed([text], "query")[0]
