"""Saving and loading FAISS stores so that only verified bytes are deserialized.

A FAISS store is saved as ``index.faiss`` and a pickle, ``index.pkl``, and unpickling
can run code. :func:`save_faiss` writes ``manifest.json`` with the SHA-256 of both files, signed
with this user's index signing key (:mod:`~rag_fusion_chain.retrievers.signing`).
:func:`load_faiss` reads each file once, verifies the signature and the hashes over the bytes it
read, and deserializes those same bytes, the pickle through an allow-list of classes
(:mod:`~rag_fusion_chain.retrievers.docstore_pickle`). A directory whose manifest is unsigned,
signed with another key or does not match is refused (:class:`UntrustedIndexError`) unless
``trust=True``, which skips the signature but not the allow-list.

>>> save_faiss(store, "indexes/faiss")  # doctest: +SKIP
>>> store = load_faiss("indexes/faiss", embeddings)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import secrets
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings

from rag_fusion_chain.models import backends_agree, embedding_identity
from rag_fusion_chain.retrievers.docstore_pickle import load_docstore
from rag_fusion_chain.retrievers.signing import (
    TRUST_ADVICE,
    UntrustedIndexError,
    sign,
    verify_signature,
)

if TYPE_CHECKING:
    from langchain_community.vectorstores import FAISS

MANIFEST_FILE = "manifest.json"
FAISS_FORMAT = "rag_fusion_chain.faiss"
FAISS_FORMAT_VERSION = 1
FAISS_FILES = ("index.faiss", "index.pkl")
"""The files ``FAISS.save_local`` writes; the manifest must list exactly these."""


def faiss_store_class() -> type[FAISS]:
    try:
        import faiss  # noqa: F401 - the store imports it only when used
        from langchain_community.vectorstores import FAISS
    except ImportError as error:
        raise ImportError(
            'FAISS stores need faiss-cpu and langchain-community: pip install "rag-fusion-chain[faiss]"'
        ) from error
    return FAISS


def _kit_version() -> str:
    from rag_fusion_chain._version import __version__

    return __version__


def save_faiss(store: FAISS, path: str | Path) -> Path:
    """Save a FAISS store as ``FAISS.save_local`` does, with a signed ``manifest.json`` beside it.

    The manifest holds the kit version, each file's SHA-256, the embedding identity and the
    store's distance settings (which ``load_local`` does not restore by itself), signed with the
    user's index signing key (created on first use; see the module docstring). The hashes are
    of the bytes serialized in memory, and each file is written under a fresh name and renamed
    into place: a file changed on disk meanwhile never gets signed.

    >>> save_faiss(store, "indexes/faiss")  # doctest: +SKIP
    PosixPath('indexes/faiss')
    """
    import faiss

    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    contents = {
        "index.faiss": faiss.serialize_index(store.index).tobytes(),
        "index.pkl": pickle.dumps((store.docstore, store.index_to_docstore_id)),
    }
    embeddings = store.embeddings
    manifest = {
        "format": FAISS_FORMAT,
        "format_version": FAISS_FORMAT_VERSION,
        "kit_version": _kit_version(),
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in contents.items()},
        "embedding": embedding_identity(embeddings) if embeddings is not None else None,
        "distance_strategy": str(store.distance_strategy.value),
        "normalize_L2": bool(store._normalize_L2),
        "documents": int(store.index.ntotal),
    }
    for name, data in contents.items():
        _write_new_file(directory / name, data)
    _write_new_file(directory / MANIFEST_FILE, json.dumps(sign(manifest), indent=2).encode())
    return directory


def _write_new_file(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file beside ``path`` (never an existing one), then rename it."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


def load_faiss(path: str | Path, embeddings: Embeddings, *, trust: bool = False) -> FAISS:
    """Load a FAISS index saved by :func:`build_faiss`/:func:`save_faiss`, verifying it first.

    Each file is read once; the bytes that were verified are the bytes that are deserialized,
    so a file swapped after the check is never read. ``manifest.json`` must carry a valid
    signature under this user's index signing key and each file's SHA-256 must match it;
    otherwise :class:`UntrustedIndexError`. The pickle is then opened with an allow-list
    (:mod:`~rag_fusion_chain.retrievers.docstore_pickle`): a docstore and documents, nothing
    that runs code. ``trust=True`` skips the signature and hashes (an index from elsewhere
    whose origin you trust, or plain ``FAISS.save_local`` output without a manifest, then
    loaded with LangChain's default distance settings), never the allow-list. A warning is
    issued when ``embeddings`` differ from those that built the index.

    >>> store = load_faiss("indexes/faiss", embeddings)  # doctest: +SKIP
    """
    FAISS = faiss_store_class()  # noqa: N806 - a class
    directory = Path(path)
    if not directory.is_dir():
        raise FileNotFoundError(f"FAISS index directory not found: {directory}")
    manifest = _read_manifest(directory, required=not trust)
    contents = {name: _read_index_file(directory / name) for name in FAISS_FILES}
    if not trust:
        verify_signature(manifest or {}, directory / MANIFEST_FILE)
        _verify_files(directory, manifest, contents)
    index, docstore, index_to_docstore_id = _deserialize(directory, contents)
    store = FAISS(embeddings, index, docstore, index_to_docstore_id, **_store_settings(manifest))
    warn_on_embedding_change(manifest, embeddings, directory)
    return store


def _read_index_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        raise FileNotFoundError(f"FAISS index file missing: {path}") from None


def _deserialize(directory: Path, contents: dict[str, bytes]) -> tuple[Any, Any, dict[int, str]]:
    """The FAISS index and the docstore from the bytes read (and verified) before."""
    import faiss
    import numpy as np

    try:
        index = faiss.deserialize_index(np.frombuffer(contents["index.faiss"], dtype=np.uint8))
        docstore, index_to_docstore_id = load_docstore(
            contents["index.pkl"], directory / "index.pkl"
        )
    except UntrustedIndexError:
        raise
    except Exception as error:  # noqa: BLE001 - re-raised: a corrupt file, named
        raise ValueError(
            f"could not load the FAISS index in {directory}; its files are corrupt or not "
            f"a LangChain FAISS index ({type(error).__name__}: {error})"
        ) from error
    return index, docstore, index_to_docstore_id


def _read_manifest(directory: Path, *, required: bool) -> dict[str, Any] | None:
    manifest_path = directory / MANIFEST_FILE
    if not manifest_path.is_file():
        if required:
            raise UntrustedIndexError(
                f"{directory} has no {MANIFEST_FILE}, so its pickle file cannot be verified and "
                "will not be loaded (unpickling can run arbitrary code). Indexes saved by "
                f"build_faiss/save_faiss have one. {TRUST_ADVICE}"
            )
        return None
    try:
        manifest = json.loads(manifest_path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UntrustedIndexError(
            f"{manifest_path} is not valid JSON: {error}. {TRUST_ADVICE}"
        ) from error
    if not isinstance(manifest, dict) or manifest.get("format") != FAISS_FORMAT:
        raise UntrustedIndexError(
            f"{manifest_path} is not a {FAISS_FORMAT} manifest. {TRUST_ADVICE}"
        )
    return manifest


def _verify_files(
    directory: Path, manifest: dict[str, Any] | None, contents: dict[str, bytes]
) -> None:
    """Raise unless the manifest lists exactly the FAISS files and every hash matches."""
    files = manifest.get("files") if manifest else None
    if not isinstance(files, dict) or sorted(files) != sorted(FAISS_FILES):
        raise UntrustedIndexError(
            f"{directory / MANIFEST_FILE} must list exactly {list(FAISS_FILES)}; "
            f"it lists {sorted(files) if isinstance(files, dict) else files!r}"
        )
    for name in FAISS_FILES:
        if hashlib.sha256(contents[name]).hexdigest() != files[name]:
            raise UntrustedIndexError(
                f"{directory / name} does not match the SHA-256 recorded in {MANIFEST_FILE}: it "
                f"changed after the index was saved (corrupted or tampered with), so it will not "
                f"be unpickled. {TRUST_ADVICE}"
            )


def _store_settings(manifest: dict[str, Any] | None) -> dict[str, Any]:
    """The distance settings to restore; LangChain's defaults when there is no manifest."""
    if manifest is None:
        return {}
    from langchain_community.vectorstores.utils import DistanceStrategy

    return {
        "distance_strategy": DistanceStrategy(manifest["distance_strategy"]),
        "normalize_L2": bool(manifest["normalize_L2"]),
    }


def warn_on_embedding_change(
    manifest: dict[str, Any] | None, embeddings: Embeddings, where: Path | str
) -> None:
    built_with = (manifest or {}).get("embedding")
    loading_with = embedding_identity(embeddings)
    if built_with and built_with != loading_with and not backends_agree(built_with, embeddings):
        warnings.warn(
            f"{where} was built with embeddings {built_with!r} but is loaded with "
            f"{loading_with!r}; query vectors may not be comparable with the stored ones",
            stacklevel=3,
        )


__all__ = [
    "FAISS_FILES",
    "MANIFEST_FILE",
    "faiss_store_class",
    "load_faiss",
    "save_faiss",
    "warn_on_embedding_change",
]
