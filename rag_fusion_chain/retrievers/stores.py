"""Vector stores (FAISS, Chroma) and :class:`VectorRetriever`, a batched retriever over them.

``metadata["score"]`` is the cosine similarity: FAISS holds unit vectors in an L2 index (cosine =
1 - d / 2), Chroma uses the cosine space. Documents are stored under ``Document.id`` (else their
content hash, as in BM25), so fusion merges a chunk found by keywords and by vectors.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import Counter
from collections.abc import Callable, MutableMapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables.config import run_in_executor
from langchain_core.utils.iter import batch_iterate
from langchain_core.vectorstores import VectorStore
from pydantic import Field, model_validator

from rag_fusion_chain.models import embed_documents_array, embedding_identity
from rag_fusion_chain.retrievers.base import BatchedRetriever, scored_copy, with_identity
from rag_fusion_chain.retrievers.columns import DocumentsById, StoredDocuments, document_columns
from rag_fusion_chain.retrievers.faiss_files import faiss_store_class, save_faiss
from rag_fusion_chain.retrievers.faiss_files import load_faiss as load_faiss
from rag_fusion_chain.retrievers.faiss_files import warn_on_embedding_change as _warn_if_other
from rag_fusion_chain.validation import environment_count, require_extra

if TYPE_CHECKING:
    from chromadb.api.types import PyEmbedding
    from langchain_chroma import Chroma
    from langchain_community.vectorstores import FAISS

DEFAULT_COLLECTION = "rag_fusion_chain"
CHROMA_TIMEOUT_SECONDS = 30.0  # seconds a Chroma server request may take (chromadb's: no bound)
EMBEDDING_METADATA_KEY = "rag_fusion_chain:embedding"
"""Chroma collection metadata naming the embeddings that built it."""
FAISS_THREADS_ENV: Final = "RAG_FUSION_FAISS_THREADS"


def _chroma_modules() -> tuple[Any, type[Chroma]]:
    chroma = require_extra("langchain_chroma", "chroma").Chroma
    return require_extra("chromadb", "chroma"), chroma


def _documents_by_id(documents: Sequence[Document]) -> MutableMapping[str, Document]:
    """``{id: document}`` in order (content hash for a missing id; stored columns as they are);
    no duplicates, not empty."""
    if not documents:
        raise ValueError("documents: cannot build a vector store from no documents")
    stored = documents if isinstance(documents, StoredDocuments) else None
    if stored is not None and all(stored.ids) and len(set(stored.ids)) == len(stored):
        return DocumentsById(stored)
    identified = list(map(with_identity, documents))  # a content hash for a missing id
    by_id = {str(document.id): document for document in identified}
    if len(by_id) < len(documents):
        counts = Counter(document.id for document in identified)
        duplicates = sorted(str(identifier) for identifier, count in counts.items() if count > 1)
        raise ValueError(
            f"documents: duplicate ids {duplicates[:5]}; documents without an id get a content "
            "hash, so identical chunks collide: deduplicate them or give each an id"
        )
    return by_id


FAISS_INDEXES: Final = {"flat": "Flat", "hnsw": "HNSW32", "ivfpq": "IVF1024,PQ{eighth}"}
"""Names for :func:`build_faiss`'s ``index`` (PQ: a byte per 8 dimensions); else factory strings."""
HNSW_EF_CONSTRUCTION: Final = 40
HNSW_EF_SEARCH: Final = 128  # recall@10 0.983 at 1M clustered vectors (64: 0.959; results/scale.md)
TRAINING_SAMPLE: Final = 100_000  # vectors that train an IVF or PQ index, at most
ADD_BLOCK: Final = 65_536  # rows normalised (in a copy) and added at a time, when not unit


def build_faiss(
    documents: Sequence[Document],
    embeddings: Embeddings,
    path: str | Path | None = None,
    *,
    vectors: Any = None,
    index: str = "flat",
) -> FAISS:
    """Index ``documents`` (not mutated) in an in-memory FAISS store, saved to ``path`` if given.

    ``vectors``: precomputed embeddings (a row per document, not mutated) instead of embedding the
    texts. ``index``: ``"flat"`` (exact), ``"hnsw"``, ``"ivfpq"`` or an ``index_factory`` string.
    """
    FAISS = faiss_store_class()  # noqa: N806 - a class
    import numpy as np

    from rag_fusion_chain.retrievers.docstore import ColumnDocstore

    by_id = _documents_by_id(documents)
    if vectors is None:  # by_id holds the documents in their order
        vectors = embed_documents_array(embeddings, document_columns(documents)[1])
    matrix, norms = _matrix_and_norms(vectors, len(by_id))
    faiss_index = empty_faiss_index(index, int(matrix.shape[1]))
    if hasattr(faiss_index, "hnsw"):
        faiss_index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        faiss_index.hnsw.efSearch = HNSW_EF_SEARCH
    if not faiss_index.is_trained:  # IVF, PQ: trained on a fixed sample of the unit vectors
        sample = np.random.default_rng(0).permutation(len(matrix))[:TRAINING_SAMPLE]
        try:
            faiss_index.train(_unit_rows(matrix, norms, np.sort(sample)))
        except RuntimeError as error:  # fewer vectors than IVF lists or PQ centroids
            raise ValueError(
                f"index: {index!r} cannot be trained on {len(matrix)} vectors ({str(error).rpartition('failed: ')[2]}); use 'flat' or 'hnsw' for a small collection"
            ) from error
    if matrix.dtype == "float32" and matrix.flags.c_contiguous and abs(norms - 1).max() <= 1e-5:
        faiss_index.add(matrix)  # unit vectors already: FAISS's one copy, as a plain add makes
    else:
        for start in range(0, len(matrix), ADD_BLOCK):
            faiss_index.add(_unit_rows(matrix, norms, slice(start, start + ADD_BLOCK)))
    docstore = ColumnDocstore(by_id)  # type: ignore[arg-type]
    store = FAISS(embeddings, faiss_index, docstore, dict(enumerate(by_id)), normalize_L2=True)
    if path is not None:
        save_faiss(store, path)
    return store


def _unit_rows(matrix: Any, norms: Any, rows: Any) -> Any:
    """A float32 unit-vector copy of ``matrix[rows]`` (the caller's array is not changed)."""
    import numpy as np

    return np.ascontiguousarray(matrix[rows] / norms[rows, None], dtype=np.float32)


def _matrix_and_norms(vectors: Any, count: int) -> tuple[Any, Any]:
    """``vectors`` as a 2-D array of ``count`` rows (a numpy array as it is) and each row's L2
    norm (1 for a zero row); ValueError for another shape, NaN or infinite values."""
    import numpy as np

    matrix = vectors if isinstance(vectors, np.ndarray) else np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or len(matrix) != count or matrix.shape[1] == 0:
        raise ValueError(
            f"vectors: expected {count} rows (one per document) of d > 0 numbers, "
            f"got shape {matrix.shape}"
        )
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
    if not np.isfinite(norms).all():
        raise ValueError("vectors: contain NaN or infinite values (or ones too large to square)")
    norms[norms == 0] = 1.0
    return matrix, norms


def empty_faiss_index(index: str, dimension: int, name: str = "index") -> Any:
    """An empty FAISS index of type ``index``; a ValueError naming ``name`` if FAISS cannot make it."""
    import faiss

    try:
        factory = FAISS_INDEXES.get(index, index).replace("{eighth}", str(dimension // 8))
        return faiss.index_factory(dimension, factory, faiss.METRIC_L2)
    except RuntimeError as error:
        raise ValueError(
            f"{name}: FAISS cannot make {index!r} for {dimension}-dimensional vectors ({str(error).rpartition('failed: ')[2]}); "
            f"use {sorted(FAISS_INDEXES)} or a FAISS index_factory string"
        ) from error


def chroma_http_client(
    host: str, port: int, ssl: bool = False, *, timeout: float = CHROMA_TIMEOUT_SECONDS
) -> Any:
    """A client of the Chroma server at ``host:port``, requests bounded by ``timeout``; ValueError if
    none answers, TimeoutError if it does not answer in time. chromadb's client asks the server
    while it is made, without a bound: it is made in a daemon thread, waited for ``timeout``."""
    chromadb, _ = _chroma_modules()
    made: Future[Any] = Future()

    def make() -> None:
        try:
            made.set_result(
                chromadb.HttpClient(host, port, ssl, settings=chromadb.config.Settings())
            )
        except Exception as error:
            made.set_exception(error)

    threading.Thread(target=make, name="rag-fusion-chroma", daemon=True).start()
    try:
        client = made.result(timeout)
    except ValueError as error:  # "Could not connect to a Chroma server": say where it looked
        raise ValueError(f"{error} (at {host}:{port})") from error
    except TimeoutError as error:  # a server (or proxy) that accepts and never answers
        message = f"the Chroma server at {host}:{port} did not answer within {timeout} s"
        raise TimeoutError(message) from error
    if (session := getattr(getattr(client, "_server", None), "_session", None)) is not None:
        session.timeout = timeout
    return client


def _chroma_client(
    persist_directory: str | Path | None, client: Any, host: str | None, port: int | None
) -> Any:
    """A Chroma client from at most one of ``client``, ``host``, ``persist_directory``."""
    given = [name for name, value in locals().items() if name != "port" and value is not None]
    if len(given) > 1:
        raise ValueError(f"give one of persist_directory, client, host; got {given}")
    if port is not None and host is None:
        raise ValueError("port: a port needs host (client/server mode)")
    if client is not None:
        return client
    chromadb, _ = _chroma_modules()
    # langchain_chroma's default settings: Chroma refuses a second client with other settings in
    # one process or directory, so the kit's and a user's own ``Chroma(...)`` must agree.
    settings = chromadb.config.Settings()
    if host is not None:
        return chroma_http_client(host, port or 8000)
    if persist_directory is None:
        return chromadb.EphemeralClient(settings=settings)
    return chromadb.PersistentClient(path=str(persist_directory), settings=settings)


def build_chroma(
    documents: Sequence[Document],
    embeddings: Embeddings,
    *,
    collection_name: str = DEFAULT_COLLECTION,
    persist_directory: str | Path | None = None,
    client: Any = None,
    host: str | None = None,
    port: int | None = None,
) -> Chroma:
    """Embed ``documents`` into a Chroma collection (cosine space) under their ids: on disk
    (``persist_directory``), on a ``chroma run`` server (``host``/``port``), through ``client``,
    or in memory. An existing collection is added to (same ids replaced)."""
    _, Chroma = _chroma_modules()  # noqa: N806 - a class
    identified = list(_documents_by_id(documents).values())
    chroma_client = _chroma_client(persist_directory, client, host, port)
    store = Chroma(
        collection_name,
        embeddings,
        client=chroma_client,
        collection_metadata={EMBEDDING_METADATA_KEY: embedding_identity(embeddings)},
        collection_configuration={"hnsw": {"space": "cosine"}},
    )
    for chunk in batch_iterate(chroma_client.get_max_batch_size(), identified):
        store.add_documents(chunk, ids=[document.id for document in chunk])
    return store


def load_chroma(
    embeddings: Embeddings,
    *,
    collection_name: str = DEFAULT_COLLECTION,
    persist_directory: str | Path | None = None,
    client: Any = None,
    host: str | None = None,
    port: int | None = None,
) -> Chroma:
    """Open an existing Chroma collection; FileNotFoundError for a missing directory, ValueError
    naming the existing collections for a missing one, a warning for other embeddings."""
    chromadb, Chroma = _chroma_modules()  # noqa: N806 - a class
    if persist_directory is not None and not Path(persist_directory).is_dir():
        raise FileNotFoundError(f"Chroma persist directory not found: {persist_directory}")
    chroma_client = _chroma_client(persist_directory, client, host, port)
    try:
        store = Chroma(
            collection_name, embeddings, client=chroma_client, create_collection_if_not_exists=False
        )
    except chromadb.errors.NotFoundError as error:
        existing = sorted(collection.name for collection in chroma_client.list_collections())
        raise ValueError(
            f"collection_name: no Chroma collection {collection_name!r}; existing: {existing}"
        ) from error
    built_with = (store._collection.metadata or {}).get(EMBEDDING_METADATA_KEY)
    _warn_if_other(built_with, embeddings, f"Chroma collection {collection_name!r}")
    return store


_RELEVANCE: dict[str, Callable[[float], float]] = {
    "cosine": lambda distance: 1.0 - distance,
    "ip": lambda distance: 1.0 - distance,
    "l2": lambda distance: 1.0 - distance / 2.0,  # squared L2 of unit vectors
    "EUCLIDEAN_DISTANCE": lambda distance: 1.0 - distance / 2.0,  # FAISS's, also squared
    "MAX_INNER_PRODUCT": float,
}
"""Cosine similarity from the distance of each Chroma space and FAISS distance strategy."""


class VectorRetriever(BatchedRetriever):
    """Dense retriever over a vector store: ``batch`` embeds all queries in one ``embed_documents``
    (``query_embedding="per_query"``: ``embed_query`` each, for asymmetric models) and searches
    them in one ``index.search`` (FAISS) or ``collection.query`` (Chroma); other stores per vector,
    their score a similarity unless ``relevance_function`` converts it."""

    vectorstore: VectorStore
    embeddings: Embeddings | None = None
    """Query embeddings; default: the store's own (``vectorstore.embeddings``)."""
    query_embedding: Literal["batch", "per_query"] = "batch"
    relevance_function: Callable[[float], float] | None = None
    """For stores other than FAISS and Chroma: turns the store's score into higher-is-better."""
    search_parameters: dict[str, int] = Field(default_factory=dict)
    """FAISS parameters per call: ``{"efSearch": 128}`` (HNSW), ``{"nprobe": 16}`` (IVF)."""
    faiss_threads: int = Field(
        default_factory=lambda: environment_count(FAISS_THREADS_ENV, 1), ge=1
    )
    """OpenMP threads for one FAISS search: ``$RAG_FUSION_FAISS_THREADS``, else 1 (concurrent
    searches on a thread per core each oversubscribe the cores)."""

    @model_validator(mode="after")
    def _resolve_embeddings(self) -> VectorRetriever:
        self.embeddings = self.embeddings or self.vectorstore.embeddings
        if self.embeddings is None:
            raise ValueError("embeddings: the vector store has none; pass embeddings=")
        return self

    def _retrieve_many(self, queries: list[str], k: int, run_managers: Any) -> list[list[Document]]:
        assert self.embeddings is not None
        if self.query_embedding == "per_query":
            return self.search_vectors([self.embeddings.embed_query(text) for text in queries], k)
        return self.search_vectors(embed_documents_array(self.embeddings, queries), k)

    async def _aretrieve_many(
        self, queries: list[str], k: int, run_managers: Any
    ) -> list[list[Document]]:
        assert self.embeddings is not None
        if self.query_embedding == "per_query":
            vectors = await asyncio.gather(*map(self.embeddings.aembed_query, queries))
        else:
            vectors = await self.embeddings.aembed_documents(queries)
        return await run_in_executor(None, self.search_vectors, vectors, k)

    def search_vectors(self, vectors: Any, k: int) -> list[list[Document]]:
        """The ``k`` best scored copies for each query vector (lists or a numpy array)."""
        if len(vectors) == 0:
            return []
        store = self.vectorstore  # its classes named: langchain_community is not imported
        classes = {f"{kind.__module__}.{kind.__name__}" for kind in type(store).__mro__}
        if "langchain_community.vectorstores.faiss.FAISS" in classes:
            faiss = cast("FAISS", store)
            return _search_faiss(faiss, vectors, k, self.search_parameters, self.faiss_threads)
        if "langchain_chroma.vectorstores.Chroma" in classes:
            return _search_chroma(cast("Chroma", store), vectors, k)
        search = getattr(store, "similarity_search_with_score_by_vector", None)
        if search is None:
            raise TypeError(
                f"vectorstore: {type(store).__name__} has no "
                "similarity_search_with_score_by_vector; use FAISS, Chroma or a store that has it"
            )
        relevance = self.relevance_function or float
        return [
            [scored_copy(document, relevance(score)) for document, score in search(vector, k=k)]
            for vector in vectors
        ]


def _faiss_search_parameters(parameters: dict[str, int], index: Any) -> Any:
    """FAISS ``SearchParameters`` for one call, of the index's kind (FAISS ignores another's)."""
    import faiss

    kinds = {"efSearch": ("HNSW", "hnsw"), "nprobe": ("IVF", "nprobe")}  # FAISS class, index field
    name = next(iter(parameters)) if len(parameters) == 1 else ""
    if name not in kinds or not hasattr(index, kinds[name][1]):
        message = "expected {'efSearch': n} (HNSW) or {'nprobe': n} (IVF)"
        raise ValueError(f"search_parameters: {message} for {type(index).__name__}: {parameters}")
    return getattr(faiss, f"SearchParameters{kinds[name][0]}")(**{name: int(parameters[name])})


def _search_faiss(
    store: FAISS, vectors: Any, k: int, parameters: dict[str, int], threads: int
) -> list[list[Document]]:
    """All query vectors in one ``index.search`` call, on ``threads`` OpenMP threads."""
    import faiss
    import numpy as np

    relevance = _RELEVANCE.get(store.distance_strategy)
    if relevance is None:
        raise ValueError(f"unsupported FAISS distance strategy {store.distance_strategy}")
    total = int(store.index.ntotal)
    if total == 0:
        return [[] for _ in vectors]
    matrix = np.array(vectors, dtype=np.float32)
    if (given := matrix.shape[1]) != store.index.d:  # FAISS's own check: a bare assert
        raise ValueError(f"vectors: {given}-dimensional queries, {store.index.d}-dimensional index")
    if store._normalize_L2:
        faiss.normalize_L2(matrix)
    faiss.omp_set_num_threads(threads)  # per calling thread: each executor thread sets its own
    search_parameters = _faiss_search_parameters(parameters, store.index) if parameters else None
    distances, positions = store.index.search(matrix, min(k, total), params=search_parameters)
    return [
        [
            scored_copy(_faiss_document(store, int(position)), relevance(float(distance)))
            for position, distance in zip(row_positions, row_distances, strict=True)
            if position >= 0 and math.isfinite(distance)
        ]
        for row_positions, row_distances in zip(positions, distances, strict=True)
    ]


def _faiss_document(store: FAISS, position: int) -> Document:
    store_id = store.index_to_docstore_id[position]
    document = store.docstore.search(store_id)
    if not isinstance(document, Document):
        raise ValueError(f"FAISS docstore has no document for id {store_id!r}: {document}")
    return document if document.id else document.model_copy(update={"id": store_id})


def _search_chroma(store: Chroma, vectors: Any, k: int) -> list[list[Document]]:
    """All query vectors in one ``collection.query`` call."""
    configuration: Any = store._collection.configuration or {}
    spaces = [(configuration.get(kind) or {}).get("space") for kind in ("hnsw", "spann")]
    metadata_space = (store._collection.metadata or {}).get("hnsw:space", "l2")
    space = str(next(filter(None, spaces), metadata_space))
    relevance = _RELEVANCE.get(space)
    if relevance is None:
        raise ValueError(f"unsupported Chroma distance space {space!r}")
    result: Any = store._collection.query(  # each field included is a list
        # chromadb types a batch as an invariant list[Sequence[float] | Sequence[int]].
        query_embeddings=cast("list[PyEmbedding]", vectors),
        n_results=k,
        include=["documents", "metadatas", "distances"],
    )
    columns = (result[name] for name in ("ids", "documents", "metadatas", "distances"))
    return [
        [
            scored_copy(
                Document(page_content=text or "", metadata=metadata or {}, id=store_id),
                relevance(float(distance)),
            )
            for store_id, text, metadata, distance in zip(*row, strict=True)
        ]
        for row in zip(*columns, strict=True)
    ]
