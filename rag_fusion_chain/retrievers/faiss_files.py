"""Saving and loading FAISS stores: signed, hash-checked, and with no pickle in the kit's format
(``index.faiss``, ``docstore.json`` and a signed ``manifest.json``: README, Security)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import secrets
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from rag_fusion_chain._version import __version__
from rag_fusion_chain.models import backends_agree, embedding_identity
from rag_fusion_chain.retrievers import signing
from rag_fusion_chain.retrievers.columns import (
    DocumentsById,
    StoredDocuments,
    columns_json,
    document_columns,
    parse_columns,
    stored_documents,
)
from rag_fusion_chain.retrievers.signing import UntrustedIndexError, new_hash, sign, write_new_file
from rag_fusion_chain.validation import require_extra

if TYPE_CHECKING:
    from langchain_community.vectorstores import FAISS

MANIFEST_FILE = "manifest.json"
MAX_MANIFEST_BYTES = 2 << 20  # a digest per block of a 64 GiB index.faiss fits
FAISS_FORMAT = "rag_fusion_chain.faiss"
FAISS_FORMAT_VERSION = 2
INDEX_FILE = "index.faiss"
DOCSTORE_FILE = "docstore.json"
PICKLE_FILE = "index.pkl"  # beside index.faiss in FAISS.save_local folders (kit's before format 2)
_CHANGED = (
    "{} does not match the digest recorded in manifest.json: it changed after the index was "
    f"saved (corrupted or tampered with), so it will not be loaded. {signing.TRUST_ADVICE}"
)


def faiss_store_class() -> type[FAISS]:
    require_extra("faiss", "faiss")  # LangChain's store imports it only when used
    return require_extra("langchain_community.vectorstores", "faiss").FAISS  # type: ignore[no-any-return]


def save_faiss(store: FAISS, path: str | Path) -> Path:
    """Save ``store`` as ``index.faiss``, ``docstore.json`` and a signed ``manifest.json``, each
    written under a fresh name and renamed; documents already saved as a columns file (a BM25
    index's, of the same chunks) are linked to it, not written again."""
    import faiss

    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    docstore, columns = directory / DOCSTORE_FILE, _docstore_columns(store)
    files = {
        INDEX_FILE: signing.write_new_blocks(
            directory / INDEX_FILE,
            lambda write: faiss.write_index(store.index, faiss.PyCallbackIOWriter(write)),  # type: ignore[attr-defined]
            signing.BLOCK_BYTES,
        ),
        DOCSTORE_FILE: _linked(columns, docstore)
        or write_new_file(docstore, columns_json(columns, docstore)),
    }
    manifest = {
        "format": FAISS_FORMAT,
        "format_version": FAISS_FORMAT_VERSION,
        "kit_version": __version__,
        "files": files,
        "embedding": embedding_identity(store.embeddings) if store.embeddings is not None else None,
        "index": type(faiss.downcast_index(store.index)).__name__,  # IndexHNSWFlat...
        "distance_strategy": str(store.distance_strategy.value),
        "normalize_L2": bool(store._normalize_L2),
        "documents": int(store.index.ntotal),
    }
    write_new_file(directory / MANIFEST_FILE, [json.dumps(sign(manifest), indent=2).encode()])
    return directory


def docstore_columns(store: FAISS) -> StoredDocuments | None:
    """The columns a store was built or loaded with, if no write or deletion changed them."""
    by_id = getattr(store.docstore, "_dict", None)
    return by_id.unchanged() if isinstance(by_id, DocumentsById) else None


def _docstore_columns(store: FAISS) -> StoredDocuments:
    """The documents in index order, under their index ids (the store's own columns if it can)."""
    ids = list(map(store.index_to_docstore_id.__getitem__, range(int(store.index.ntotal))))
    columns = docstore_columns(store)
    if columns is not None and columns.ids == ids:
        return columns
    by_id = getattr(store.docstore, "_dict", None)
    lookup = by_id.get if isinstance(by_id, Mapping) else store.docstore.search
    documents: list[Any] = list(map(lookup, ids))
    if not set(map(type, documents)) <= {Document}:  # one C loop; subclasses checked one by one
        missing = [ids[at] for at, found in enumerate(documents) if not isinstance(found, Document)]
        if missing:
            raise ValueError(f"FAISS docstore has no documents for ids {missing[:5]}")
    _, texts, metadatas = document_columns(documents)
    return StoredDocuments(ids, texts, metadatas)


def _linked(columns: StoredDocuments, path: Path) -> str | None:
    """The digest of ``path`` made a link to the file ``columns`` were saved as, if it is still
    the file written (inode, mtime) or holds the bytes saved (else None, and nothing made).
    The kit never rewrites a file in place: a changed one fails the manifest's check on load."""
    if columns.file is None:
        return None
    source, digest, *written = columns.file
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    with contextlib.suppress(OSError):  # no hard links (another file system): it is written
        os.link(source, temporary)
        linked = os.stat(temporary)
        if [linked.st_ino, linked.st_mtime_ns] == written or signing.has_digest(temporary, digest):
            temporary.replace(path)
            return digest
    temporary.unlink(missing_ok=True)
    return None


def load_faiss(path: str | Path, embeddings: Embeddings, *, trust: bool = False) -> FAISS:
    """Load a FAISS index saved by :func:`save_faiss`, verified first (else UntrustedIndexError;
    ``trust=True`` skips that, not the pickle allow-list); other embeddings give a warning."""
    FAISS = faiss_store_class()  # noqa: N806 - a class
    import faiss
    from langchain_community.vectorstores.utils import DistanceStrategy

    from rag_fusion_chain.retrievers.docstore import ColumnDocstore

    directory = Path(path)
    if not (directory / INDEX_FILE).exists():  # an index directory keeps its stores deeper
        raise FileNotFoundError(
            f"no FAISS index ({INDEX_FILE}) in {directory} ({signing.STORE_HINT})"
        )
    manifest = _read_manifest(directory, required=not trust)
    docstore_name = _docstore_name(directory, manifest)
    files = (manifest or {}).get("files")
    files = files if isinstance(files, dict) else {}  # each hashed as its recorded digest was
    docstore_bytes = signing.read_whole(directory / docstore_name)
    docstore_digest = signing.recorded_digest(new_hash(files.get(docstore_name), docstore_bytes))
    listed, expected = sorted(files), sorted({INDEX_FILE, docstore_name})
    if not trust and listed != expected:
        raise UntrustedIndexError(f"{directory / MANIFEST_FILE} must list {expected}, not {listed}")
    if not trust and files[docstore_name] != docstore_digest:
        raise UntrustedIndexError(_CHANGED.format(directory / docstore_name))
    file = signing.open_regular_file(directory / INDEX_FILE)
    try:  # FAISS's C++ reader gets only bytes whose digest matched, a block at a time
        with file:
            refusal = UntrustedIndexError(_CHANGED.format(directory / INDEX_FILE))
            blocks = file if trust else signing.CheckedBlocks(file, files[INDEX_FILE], refusal)
            index = faiss.read_index(faiss.PyCallbackIOReader(blocks.read, signing.BLOCK_BYTES))  # type: ignore[attr-defined]
            del blocks  # the last block freed before the docstore is parsed
        if docstore_name == PICKLE_FILE:
            docstore, index_ids = _load_docstore_pickle(docstore_bytes, directory / PICKLE_FILE)
        else:
            columns = parse_columns(docstore_bytes)
            stored = stored_documents(columns, directory / DOCSTORE_FILE, int(index.ntotal))
            stored.file = directory / DOCSTORE_FILE, docstore_digest
            docstore = ColumnDocstore(DocumentsById(stored))  # type: ignore[arg-type]
            index_ids = dict(enumerate(stored.ids))
    except UntrustedIndexError:
        raise
    except Exception as error:  # noqa: BLE001 - re-raised: a corrupt file, named
        raise ValueError(
            f"could not load the FAISS index in {directory}; its files are corrupt or not "
            f"a LangChain FAISS index ({type(error).__name__}: {error})"
        ) from error
    settings: dict[str, Any] = {}
    if manifest is not None:  # else LangChain's defaults
        settings["distance_strategy"] = DistanceStrategy(manifest["distance_strategy"])
        settings["normalize_L2"] = bool(manifest["normalize_L2"])
    store = FAISS(embeddings, index, docstore, index_ids, **settings)
    warn_on_embedding_change((manifest or {}).get("embedding"), embeddings, directory)
    return store


def _docstore_name(directory: Path, manifest: dict[str, Any] | None) -> str:
    """``docstore.json`` (format 2), else LangChain's ``index.pkl`` (older manifests, save_local)."""
    if manifest is None:
        return PICKLE_FILE if (directory / PICKLE_FILE).exists() else DOCSTORE_FILE
    return DOCSTORE_FILE if manifest.get("format_version") == FAISS_FORMAT_VERSION else PICKLE_FILE


ALLOWED_GLOBALS: Final = frozenset(  # (module, name) of each class a FAISS docstore pickle may name
    {
        ("langchain_community.docstore.in_memory", "InMemoryDocstore"),
        ("langchain_core.documents.base", "Document"),
        ("builtins", "dict"),  # a loaded docstore's documents, re-saved by FAISS.save_local
        ("decimal", "Decimal"),
        *(("uuid", name) for name in ("UUID", "SafeUUID")),
        *(("datetime", name) for name in ("date", "datetime", "time", "timedelta", "timezone")),
    }
)


class _DocstoreUnpickler(pickle.Unpickler):
    """Resolves only :data:`ALLOWED_GLOBALS`; anything else is refused before it is called."""

    def __init__(self, data: bytes | bytearray, where: str | Path) -> None:
        super().__init__(io.BytesIO(data))
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise UntrustedIndexError(
                f"{self.where} names {module}.{name}, which a FAISS docstore does not hold; "
                "it was not loaded (a pickle naming other classes or functions can run code)"
            )
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise UntrustedIndexError(f"{self.where} holds a persistent reference; not loaded")


def _load_docstore_pickle(data: bytes | bytearray, where: str | Path) -> tuple[Any, dict[int, str]]:
    """``(InMemoryDocstore, {position: id})`` from pickle bytes; :class:`UntrustedIndexError`
    for a pickle naming other classes, ValueError for another structure."""
    from langchain_community.docstore.in_memory import InMemoryDocstore

    loaded = _DocstoreUnpickler(data, where).load()  # load_faiss names a decoding failure
    docstore, index_to_id = loaded if isinstance(loaded, tuple) and len(loaded) == 2 else (0, 0)
    stored = getattr(docstore, "_dict", None)
    if not (
        isinstance(docstore, InMemoryDocstore)
        and isinstance(stored, dict)
        and isinstance(index_to_id, dict)
        and set(map(type, stored.values())) <= {Document}
        and set(map(type, index_to_id)) <= {int}
        and set(map(type, index_to_id.values())) <= {str}
    ):
        raise ValueError(f"{where} is not a LangChain FAISS docstore pickle (Documents, ids)")
    return docstore, index_to_id


def _read_manifest(directory: Path, *, required: bool) -> dict[str, Any] | None:
    """The parsed manifest; when ``required``, present and signed with this user's key."""
    manifest_path = directory / MANIFEST_FILE
    if not manifest_path.exists():
        if required:
            raise UntrustedIndexError(
                f"{directory} has no {MANIFEST_FILE}, so its files cannot be verified and will not "
                f"be loaded. Indexes saved by build_faiss/save_faiss have one. {signing.TRUST_ADVICE}"
            )
        return None
    try:
        manifest = json.loads(signing.read_whole(manifest_path, MAX_MANIFEST_BYTES).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        message = f"{manifest_path} is not valid JSON: {error}. {signing.TRUST_ADVICE}"
        raise UntrustedIndexError(message) from error
    if not isinstance(manifest, dict) or manifest.get("format") != FAISS_FORMAT:
        message = f"{manifest_path} is not a {FAISS_FORMAT} manifest. {signing.TRUST_ADVICE}"
        raise UntrustedIndexError(message)
    if required:
        signing.verify_signature(manifest, manifest_path)
    return manifest


def warn_on_embedding_change(
    built_with: str | None, embeddings: Embeddings, where: Path | str
) -> None:
    """Warn when the store at ``where``, built by embeddings ``built_with``, is loaded with others."""
    loading_with = embedding_identity(embeddings)
    if built_with and built_with != loading_with and not backends_agree(built_with, embeddings):
        warnings.warn(
            f"{where} was built with embeddings {built_with!r} but is loaded with "
            f"{loading_with!r}; query vectors may not be comparable with the stored ones",
            stacklevel=3,
        )
