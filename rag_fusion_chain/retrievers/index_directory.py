"""Index directories: a vector store and a BM25 index of the same chunks in one folder, whose
signed ``index.json`` says what built them and names the version folder ``.versions/<id>/``
holding ``faiss/`` or ``chroma/`` and ``bm25/``; a build writes a new version, then switches
``index.json`` in one step (README, Security). Progress goes to ``on_progress(stage, advance,
total)`` (``load``, ``bm25``, ``embed``, each announced with ``advance=0``); nothing here prints."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.utils.iter import batch_iterate
from langchain_core.vectorstores import VectorStore

from rag_fusion_chain import ingest, models
from rag_fusion_chain._version import __version__
from rag_fusion_chain.models import PrecomputedEmbeddings
from rag_fusion_chain.retrievers import signing
from rag_fusion_chain.retrievers.bm25 import BM25Retriever
from rag_fusion_chain.retrievers.columns import document_columns
from rag_fusion_chain.retrievers.faiss_files import docstore_columns
from rag_fusion_chain.retrievers.hybrid import hybrid_retriever
from rag_fusion_chain.retrievers.signing import UntrustedIndexError
from rag_fusion_chain.retrievers.stores import (
    VectorRetriever,
    build_chroma,
    build_faiss,
    empty_faiss_index,
    load_chroma,
    load_faiss,
)

if TYPE_CHECKING:
    from langchain_community.vectorstores import FAISS

INDEX_FILE = "index.json"
MAX_SETTINGS_BYTES = 1 << 30  # index.json's bound: about 3M sources at some 300 bytes each
INDEX_FORMAT = "rag_fusion_chain.index"
BM25_DIRECTORY = "bm25"
VERSIONS_DIRECTORY = ".versions"  # one folder per build; index.json names the current one
_VERSION_NAME = re.compile(r"[0-9a-f]{16}")
_EXISTS = "{} holds an index: pass update=True or force=True (rag-fusion index --update/--force)"
_CONFLICT = (
    "{}: the index in {} has {!r}, not {!r}; leave it out to keep it, or pass force=True "
    "(rag-fusion index --force) to rebuild with it"
)
RECORDED: Final = "recorded"
"""``chunk_size``'s default: the index's own on an update, else ``ingest.DEFAULT_CHUNK_SIZE``."""
_SETTINGS: Final = {  # each setting's default, and the value that leaves it to the index's own
    "store": ("faiss", None),
    "faiss_index": ("flat", None),
    "chunk_size": (ingest.DEFAULT_CHUNK_SIZE, RECORDED),
    "chunk_overlap": (ingest.DEFAULT_CHUNK_OVERLAP, None),
    "embedding_identity": (None, None),  # always given
}
STORES = ("faiss", "chroma")
TIMESTAMP_GRANULARITY_NS = 2_000_000_000  # FAT's 2 s, the coarsest file timestamps in use
TEXTS_PER_EMBEDDING_CALL = 64  # while building (and per progress step); the model batches within

ProgressCallback = Callable[[str, int, int], None]  # on_progress(stage, advance, total)


def _embedded(embeddings: Embeddings, texts: list[str], on_batch: Callable[[int], None]) -> Any:
    """One float32 row per text (4 bytes a number, not a list's 24+), embedded in batches of
    similar lengths, each reported to ``on_batch``."""
    import numpy as np

    order = sorted(range(len(texts)), key=lambda position: len(texts[position]))
    matrix = np.empty((0, 0), dtype=np.float32)
    for positions in batch_iterate(TEXTS_PER_EMBEDDING_CALL, order):
        batch = models.embed_documents_array(embeddings, [texts[at] for at in positions])
        if not len(matrix):
            matrix = np.empty((len(texts), batch.shape[1]), dtype=np.float32)
        matrix[positions] = batch
        on_batch(len(positions))
    return matrix


@dataclass
class OpenedIndex:
    """A loaded index directory: its settings, vector retriever and BM25 retriever."""

    settings: dict[str, Any]
    vectors: VectorRetriever
    bm25: BM25Retriever

    def retrievers(self, hybrid: bool, k: int) -> list[BaseRetriever]:
        """The retrievers to fan out over: the vector store, or BM25 and vectors fused."""
        vectors = self.vectors.model_copy(update={"k": k})
        if hybrid:
            return [hybrid_retriever(self.bm25.model_copy(update={"k": k}), vectors, k=k)]
        return [vectors]


def build_index(
    sources_or_documents: Sequence[str | os.PathLike[str]] | Sequence[Document],
    out: str | os.PathLike[str],
    *,
    store: str | None = None,
    faiss_index: str | None = None,
    embedding: str | Embeddings | None = None,
    embedding_name: str | None = None,
    chunk_size: int | None | Literal["recorded"] = RECORDED,
    chunk_overlap: int | None = None,
    force: bool = False,
    update: bool = False,
    on_progress: ProgressCallback | None = None,
    load_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Load, split, embed and store ``sources_or_documents`` (:func:`ingest.load`'s sources, or
    documents) into the index directory ``out``; return its settings. ``embedding``: a
    :func:`models.embeddings` name, or an Embeddings object (recorded as ``embedding_name`` if
    that makes the same identity). ``chunk_size=None`` keeps documents whole; ``load_options``
    go to :func:`ingest.load_with_report`. An existing index is a FileExistsError unless
    ``force`` (rebuild) or ``update`` (README: only new and changed sources are embedded)."""
    out = Path(out)
    if (out / INDEX_FILE).exists() and not (force or update):
        raise FileExistsError(_EXISTS.format(out))
    previous = read_settings(out, verified=True) if update and (out / INDEX_FILE).exists() else {}
    embeddings, embedding_name = _chosen_embeddings(embedding, embedding_name, previous, out)
    identity = models.embedding_identity(embeddings)
    given = {"store": store, "faiss_index": faiss_index, "chunk_size": chunk_size}
    given |= {"chunk_overlap": chunk_overlap, "embedding_identity": identity}
    chosen = _chosen_settings(out, previous, given)
    if chosen["faiss_index"] not in (None, "flat"):  # fails now, not after the embedding
        empty_faiss_index(chosen["faiss_index"], len(embeddings.embed_query("x")), "faiss_index")
    report = on_progress or (lambda stage, advance, total: None)
    started = time.time_ns()
    options = {**(load_options or {}), "unchanged": _unchanged_files(previous)}
    sources, loaded = _load(sources_or_documents, report, options)
    groups, read = _groups(loaded, previous)
    settings = {  # signed with this user's key: open_index loads nothing it does not vouch for
        "format": INDEX_FORMAT,
        "kit_version": __version__,
        **chosen,  # store, FAISS index, chunking, embedding identity
        "embedding": embedding_name,
        "embedding_precision": models.embedding_precision(embeddings),  # f32 / bf16 / None
        "sources": sources,
        "files": len(loaded.loaded),
        "skipped": [asdict(skipped) for skipped in loaded.skipped],  # SourceProblem redacts
        "documents": sum(documents for _, documents in read.values()),
        "source_hashes": {source: content_hash for source, (content_hash, _) in read.items()},
        "source_files": {  # each file's stamp and document count: unchanged, it is not read
            source: [*stamp, read[source][1]]
            for name, stamp in loaded.stamps.items()
            if (source := _source_name(name)) in read
        },
        "read_at_ns": started,
    }
    reused, kept = _previous_chunks(out, previous, settings["source_hashes"], embeddings)
    chunks: list[Document | int] = []
    for source, group in groups.items():
        if source in kept:
            chunks += kept[source]
            continue
        if chosen["chunk_size"] is not None:
            group = ingest.split_documents(
                group, chunk_size=chosen["chunk_size"], chunk_overlap=chosen["chunk_overlap"]
            )
        chunks += [_without_url_credentials(chunk) for chunk in group]  # ids, sources: stored
    fresh = sum(isinstance(chunk, Document) for chunk in chunks)
    dropped = previous.get("source_hashes", {}).keys() - settings["source_hashes"].keys()
    settings |= {"chunks": len(chunks), "embedded_chunks": fresh, "dropped_sources": len(dropped)}
    return _write_version(
        out.absolute(),
        settings,
        lambda folder: _write_index(folder, settings, chunks, reused, embeddings, report),
        force or update,
    )


def _chosen_settings(out: Path, previous: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The store, FAISS index, chunking (and embeddings) to build with: those given, else those
    ``previous`` records, else the defaults; ValueError for one ``previous`` records otherwise."""
    chosen = {}
    for key, value in given.items():
        default, unset = _SETTINGS[key]
        if value == unset:
            value = previous.get(key, default)
        elif key in previous and previous[key] != value:
            raise ValueError(_CONFLICT.format(key, out, previous[key], value))
        chosen[key] = value
    store = chosen["store"]
    if store not in STORES:
        raise ValueError(f"unknown store {store!r}: choose one of {', '.join(STORES)}")
    if store != "faiss" and given["faiss_index"] not in (None, "flat"):
        raise ValueError(
            f"faiss_index: {given['faiss_index']!r} needs store='faiss', not {store!r}"
        )
    chosen["faiss_index"] = chosen["faiss_index"] if store == "faiss" else None
    size, overlap = chosen["chunk_size"], chosen["chunk_overlap"]
    if size is not None and (overlap or 0) >= size:  # refused before loading, not after
        raise ValueError(f"chunk_overlap ({overlap}) must be smaller than chunk_size ({size})")
    return chosen | ({"chunk_overlap": None} if size is None else {})


def _chosen_embeddings(
    embedding: str | Embeddings | None,
    embedding_name: str | None,
    recorded: dict[str, Any],
    directory: Path,
) -> tuple[Embeddings, str | None]:
    """The embeddings to use and the name recorded for them (checked by identity): ``embedding``,
    else the name in the ``recorded`` settings of the index in ``directory`` (if any)."""
    if recorded and not embedding:
        if not recorded.get("embedding"):
            raise ValueError(
                f"embedding: {directory} was built with embeddings given as an object "
                f"({recorded.get('embedding_identity')}); pass the same embeddings"
            )
        embedding = str(recorded["embedding"])
    if not isinstance(embedding, Embeddings):
        if embedding_name is not None:
            raise TypeError("embedding_name goes with an Embeddings object; a name is recorded")
        name = embedding or os.environ.get(models.EMBEDDING_ENV) or models.DEFAULT_EMBEDDING
        return models.embeddings(name), name
    if embedding_name is not None:
        named = models.embedding_identity(models.embeddings(embedding_name))
        given = models.embedding_identity(embedding)
        if named != given:
            raise ValueError(f"embedding_name: {embedding_name!r} makes {named}, not {given}")
    return embedding, embedding_name


def _source_name(source: object) -> str:
    """A chunk's ``source`` as stored (a URL without credentials; "" if none)."""
    text = source if isinstance(source, str) else ""
    return models.redact_credentials(text) if "@" in text else text  # none without an @


def _unchanged_files(previous: dict[str, Any]) -> Callable[[str, ingest.FileStamp], bool]:
    """Whether a file keeps its previous chunks unread: its stamp is the recorded one, and older
    than the previous build's reading by more than a timestamp's granularity (README)."""
    recorded = previous.get("source_files", {})
    before = previous.get("read_at_ns", 0) - TIMESTAMP_GRANULARITY_NS
    return lambda name, stamp: (
        stamp[1] < before and recorded.get(_source_name(name), [])[:-1] == [*stamp]
    )


def _groups(
    loaded: ingest.LoadResult, previous: dict[str, Any]
) -> tuple[dict[str, list[Document]], dict[str, tuple[str, int]]]:
    """Each source's documents, in load order (none for an unchanged file), and its content hash
    and document count (an unchanged file's recorded ones)."""
    groups: dict[str, list[Document]] = {_source_name(name): [] for name in loaded.loaded}
    for document in loaded.documents:
        groups.setdefault(_source_name(document.metadata.get("source")), []).append(document)
    unchanged = {_source_name(name) for name in loaded.unchanged}
    return groups, {
        source: (previous["source_hashes"][source], previous["source_files"][source][-1])
        if source in unchanged
        else (_content_hash(group), len(group))
        for source, group in groups.items()
    }


def _content_hash(documents: list[Document]) -> str:
    """SHA-256 of what a source loaded as: ids, texts and metadata."""
    content = [[document.id, document.page_content, document.metadata] for document in documents]
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


_Reused = tuple[BM25Retriever | None, "FAISS | None", Path | None]  # BM25, FAISS, stores folder


def _previous_chunks(
    out: Path, previous: dict[str, Any], hashes: dict[str, str], embeddings: Embeddings
) -> tuple[_Reused, dict[str, list[int]]]:
    """The previous index's BM25 retriever, FAISS store and stores folder (None without them),
    and the positions of the chunks of each source whose content hash is unchanged."""
    if not previous:
        return (None, None, None), {}
    folder = stores_directory(out, previous)
    vectors = load_faiss(folder / "faiss", embeddings) if previous["store"] == "faiss" else None
    same_as = docstore_columns(vectors) if vectors else None  # the texts parsed once
    bm25 = BM25Retriever.load(folder / BM25_DIRECTORY, same_as=same_as)
    if same_as is not None and bm25.documents is not same_as:  # unsigned texts never signed anew
        raise UntrustedIndexError(f"{folder}/bm25: not the signed FAISS texts; rebuild (--force)")
    unchanged = hashes.items() & previous.get("source_hashes", {}).items()
    kept: dict[str, list[int]] = {source: [] for source, _ in unchanged}
    for position, metadata in enumerate(document_columns(bm25.documents)[2]):
        kept.get(_source_name(metadata.get("source")), []).append(position)
    return (bm25, vectors, folder), kept


def _load(
    sources_or_documents: Sequence[Any], report: ProgressCallback, load_options: dict[str, Any]
) -> tuple[list[str], ingest.LoadResult]:
    """The source names and what loading them gave (given documents are taken as they are)."""
    if isinstance(sources_or_documents, (str, os.PathLike)):
        raise TypeError("sources_or_documents: pass a list of paths or URLs, not a single one")
    items = list(sources_or_documents)
    if items and all(isinstance(item, Document) for item in items):
        return [], ingest.LoadResult(documents=items)
    if any(isinstance(item, Document) for item in items):
        raise TypeError("sources_or_documents: give either sources or documents, not both")
    report("load", 0, len(items))
    loaded = ingest.load_with_report(
        items, on_source=lambda _: report("load", 1, len(items)), **load_options
    )
    return [models.redact_credentials(os.fspath(source)) for source in items], loaded


def _without_url_credentials(chunk: Document) -> Document:
    """``chunk``, or a copy whose id and ``source`` no longer hold a URL's user and password."""
    source = chunk.metadata.get("source")
    clean_source = models.redact_credentials(source) if isinstance(source, str) else source
    clean_id = models.redact_credentials(chunk.id) if chunk.id else chunk.id
    if clean_source == source and clean_id == chunk.id:
        return chunk
    metadata = {**chunk.metadata, "source": clean_source}
    return chunk.model_copy(update={"id": clean_id, "metadata": metadata})


def _write_index(
    directory: Path,
    settings: dict[str, Any],
    chunks: list[Document | int],
    previous: _Reused,
    embeddings: Embeddings,
    report: ProgressCallback,
) -> None:
    """The BM25 index and the vector store of ``chunks`` (an int: the ``previous`` index's chunk
    at that position, its vector and BM25 terms reused), written in ``directory``."""
    fresh = [position for position, chunk in enumerate(chunks) if isinstance(chunk, Document)]
    bm25, vectors, stores = previous
    report("bm25", 0, 1)
    new = [chunk for chunk in chunks if isinstance(chunk, Document)]
    bm25 = bm25.updated(chunks) if bm25 else BM25Retriever.from_documents(new)
    bm25.save(directory / BM25_DIRECTORY)
    report("bm25", 1, 1)
    identified, store = bm25.documents, settings["store"]  # in order, with ids
    ids, texts, _ = document_columns(identified)
    report("embed", 0, len(fresh))
    new_texts = [texts[position] for position in fresh]
    embedded = _embedded(embeddings, new_texts, lambda count: report("embed", count, len(fresh)))
    path = directory / store
    if store == "faiss":
        matrix = _vectors(ids, fresh, embedded, vectors)
        build_faiss(identified, embeddings, path, vectors=matrix, index=settings["faiss_index"])
        return
    if stores is not None:  # a copy of the previous collection, less the chunks not kept
        shutil.copytree(stores / store, path, symlinks=True)  # a link stays one, never followed
        copied = load_chroma(embeddings, persist_directory=path)
        kept = set(ids) - {ids[position] for position in fresh}
        stale = [name for name in copied.get(include=[])["ids"] if name not in kept]
        if stale:
            copied.delete(stale)
    if fresh or stores is None:
        known = PrecomputedEmbeddings(embeddings, dict(zip(new_texts, embedded, strict=True)))
        chroma = build_chroma([identified[at] for at in fresh], known, persist_directory=path)
        getattr(chroma._client, "close", lambda: None)()  # release the files


def _vectors(ids: list[str], fresh: list[int], embedded: Any, stored: FAISS | None) -> Any:
    """One row per chunk id: the ``fresh`` ones ``embedded``, the others from the previous store."""
    import faiss
    import numpy as np

    kept = np.setdiff1d(np.arange(len(ids)), fresh)
    if stored is None or not len(kept):
        return embedded
    rows = {identifier: row for row, identifier in stored.index_to_docstore_id.items()}
    try:
        wanted = np.array([rows[ids[position]] for position in kept], dtype=np.int64)
    except KeyError as error:
        raise ValueError(f"the previous FAISS store lacks chunk {error}") from None
    ivf = faiss.try_extract_index_ivf(stored.index)
    if ivf is not None:
        ivf.make_direct_map()  # PQ codes: the vectors come back approximate
    old = stored.index.reconstruct_batch(wanted)
    matrix = np.empty((len(ids), old.shape[1]), dtype=np.float32)
    matrix[kept] = old
    if fresh:  # unit rows, as the stored ones are, so that build_faiss adds them as they are
        norms = np.linalg.norm(embedded, axis=1, keepdims=True)
        matrix[fresh] = embedded / np.where(norms == 0, 1, norms)
    return matrix


def _write_version(
    out: Path, settings: dict[str, Any], write: Callable[[Path], None], force: bool
) -> dict[str, Any]:
    """Write the stores into a new version folder of ``out``, then switch ``index.json`` to it.
    The folder is locked while it is built (a killed build's lock goes with its process)."""
    created = not out.exists()
    versions = out / VERSIONS_DIRECTORY
    versions.mkdir(parents=True, exist_ok=True)
    _remove_debris(out, keep=_current_version(out))
    version = secrets.token_hex(8)
    folder = versions / version
    folder.mkdir()  # the usual permissions (mkdtemp's would be 0700)
    lock = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        write(folder)
        settings = signing.sign({**settings, "version": version})
        previous = _current_version(out)
        pending = folder / INDEX_FILE
        with pending.open("w", encoding="utf-8") as file:
            file.write(json.dumps(settings, indent=2))
            file.flush()
            os.fsync(file.fileno())
        if force:
            os.replace(pending, out / INDEX_FILE)
        else:  # a link: keeps an index another build finished meanwhile
            try:
                os.link(pending, out / INDEX_FILE)
            except FileExistsError:
                raise FileExistsError(_EXISTS.format(out)) from None
            pending.unlink()
        descriptor = os.open(out, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        for directory in (versions, out) if created else ():
            with contextlib.suppress(OSError):  # only if empty: what a failed first build made
                directory.rmdir()
        raise
    finally:
        os.close(lock)
    _remove_debris(out, keep=(version, *previous))
    return settings


def _current_version(out: Path) -> tuple[str, ...]:
    """The version ``out/index.json`` names: one name, or none (no index, or the flat layout)."""
    with contextlib.suppress(OSError, ValueError):  # no index, or not one
        version = read_settings(out).get("version")
        return (version,) if version else ()
    return ()


def _remove_debris(out: Path, *, keep: tuple[str, ...]) -> None:
    """Remove the version folders of ``out`` not in ``keep`` that no live build holds, and,
    once ``index.json`` names a version, the stores of the flat layout it replaced."""
    if _current_version(out):
        for name in (*STORES, BM25_DIRECTORY):
            if (out / name).is_dir() and not (out / name).is_symlink():
                shutil.rmtree(out / name)
    for folder in (out / VERSIONS_DIRECTORY).iterdir():
        if folder.name in keep or not folder.is_dir() or folder.is_symlink():
            continue
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            with contextlib.suppress(BlockingIOError):  # a live build holds its lock
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(descriptor)


def open_index(
    directory: str | os.PathLike[str],
    embedding: str | Embeddings | None = None,
    *,
    trust: bool = False,
) -> OpenedIndex:
    """Load an index directory written by :func:`build_index`, its ``index.json`` signed with
    this user's key (``trust=True`` skips the signatures; a pickle still goes through the
    allow-list of :func:`.faiss_files.load_faiss`). ``embedding`` overrides the recorded one."""
    directory = Path(directory)
    settings = read_settings(directory, verified=not trust)
    embeddings = _chosen_embeddings(embedding, None, settings, directory)[0]
    stores = stores_directory(directory, settings)
    store: VectorStore
    if settings["store"] == "faiss":
        store = faiss = load_faiss(stores / "faiss", embeddings, trust=trust)
        same_as = docstore_columns(faiss)  # the texts parsed once
    else:
        store, same_as = load_chroma(embeddings, persist_directory=stores / "chroma"), None
    bm25 = BM25Retriever.load(stores / BM25_DIRECTORY, same_as=same_as)
    return OpenedIndex(settings=settings, vectors=VectorRetriever(vectorstore=store), bm25=bm25)


def read_settings(directory: str | os.PathLike[str], *, verified: bool = False) -> dict[str, Any]:
    """The ``index.json`` of an index directory, checked as data; ``verified``: its signature too
    (this user's key), as :func:`open_index` and an update need it."""
    settings_path = Path(directory) / INDEX_FILE
    try:  # a FIFO or a device refused at once (ValueError), the size bounded
        settings = json.loads(signing.read_whole(settings_path, MAX_SETTINGS_BYTES).decode("utf-8"))
    except FileNotFoundError:  # or a directory
        raise FileNotFoundError(
            f"no index in {directory}: build one with build_index() or "
            f"`rag-fusion index SOURCE... --out {directory}`"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"{settings_path} is not valid JSON: {error}") from error
    formats = (INDEX_FORMAT, "rag_fusion_chain.cli_index")  # the same layout's earlier name
    if not isinstance(settings, dict) or settings.get("format") not in formats:
        raise ValueError(f"{settings_path} is not a rag-fusion index description")
    if settings.get("store") not in STORES:
        raise ValueError(f"{settings_path}: unknown store {settings.get('store')!r}")
    if not isinstance(settings.get("embedding"), (str, type(None))):
        raise ValueError(f"{settings_path}: 'embedding' must be a name or null")
    version = settings.get("version")
    if version is not None and not (isinstance(version, str) and _VERSION_NAME.fullmatch(version)):
        raise ValueError(f"{settings_path}: 'version' must be 16 hexadecimal digits")
    if verified:
        signing.verify_signature(settings, settings_path)
    return settings


def stores_directory(directory: str | os.PathLike[str], settings: dict[str, Any]) -> Path:
    """The folder holding the stores of the index ``settings`` describes: its version folder,
    or ``directory`` itself for the flat layout of earlier versions."""
    version = settings.get("version")
    return Path(directory) / VERSIONS_DIRECTORY / version if version else Path(directory)
