"""Unpickling a FAISS docstore with an allow-list: data and documents, never arbitrary code.

``FAISS.save_local`` pickles ``(InMemoryDocstore, {position: document id})``; those bytes name
only ``InMemoryDocstore`` and ``Document`` (metadata values are plain Python data). The
unpickler here resolves those two classes and a few harmless standard types (dates, UUIDs,
decimals) and refuses any other global, so a pickle whose ``__reduce__`` calls ``os.system``
or any other function fails before the call. This is defence in depth behind the signed
manifest, and what remains when the user passes ``trust=True``.

>>> docstore, index_to_id = load_docstore(pickle_bytes, "index.pkl")  # doctest: +SKIP
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any, Final

from langchain_core.documents import Document

from rag_fusion_chain.retrievers.signing import UntrustedIndexError

ALLOWED_GLOBALS: Final = frozenset(
    {
        ("langchain_community.docstore.in_memory", "InMemoryDocstore"),
        ("langchain_core.documents.base", "Document"),
        ("datetime", "date"),
        ("datetime", "datetime"),
        ("datetime", "time"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("decimal", "Decimal"),
        ("uuid", "UUID"),
        ("uuid", "SafeUUID"),
    }
)
"""``(module, name)`` of every class a FAISS docstore pickle may name."""


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


def load_docstore(data: bytes | bytearray, where: str | Path) -> tuple[Any, dict[int, str]]:
    """``(InMemoryDocstore, {position: id})`` from pickle bytes, with only allowed classes.

    Raises :class:`UntrustedIndexError` for a pickle naming anything else, ``ValueError`` for
    one that is not a FAISS docstore pickle (corrupt, or another structure).
    """
    from langchain_community.docstore.in_memory import InMemoryDocstore

    try:
        loaded = _DocstoreUnpickler(data, where).load()
    except UntrustedIndexError:
        raise
    except Exception as error:  # noqa: BLE001 - any decoding failure means a corrupt file
        raise ValueError(
            f"{where} is not a LangChain FAISS docstore pickle ({type(error).__name__}: {error})"
        ) from error
    if not (
        isinstance(loaded, tuple)
        and len(loaded) == 2
        and isinstance(loaded[0], InMemoryDocstore)
        and isinstance(loaded[1], dict)
    ):
        raise ValueError(f"{where} is not a LangChain FAISS docstore pickle (unexpected layout)")
    docstore, index_to_id = loaded
    stored = getattr(docstore, "_dict", None)
    if not isinstance(stored, dict) or not all(
        isinstance(document, Document) for document in stored.values()
    ):
        raise ValueError(f"{where}: the docstore holds something other than documents")
    if not all(
        isinstance(position, int) and isinstance(identifier, str)
        for position, identifier in index_to_id.items()
    ):
        raise ValueError(f"{where}: the position-to-id map is not {{int: str}}")
    return docstore, index_to_id


__all__ = ["ALLOWED_GLOBALS", "load_docstore"]
