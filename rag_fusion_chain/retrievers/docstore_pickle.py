"""Unpickling a LangChain ``FAISS.save_local`` docstore through an allow-list: data, never code.

The pickle holds ``(InMemoryDocstore, {position: id})`` of ``Document``s with plain metadata; any
other global (``os.system`` in a ``__reduce__``...) is refused before it is called. Defence in
depth behind the signed manifest, and what remains with ``trust=True``.
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
        ("decimal", "Decimal"),
        ("uuid", "UUID"),
        ("uuid", "SafeUUID"),
        *(("datetime", name) for name in ("date", "datetime", "time", "timedelta", "timezone")),
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
    """``(InMemoryDocstore, {position: id})`` from pickle bytes; :class:`UntrustedIndexError`
    for a pickle naming other classes, ValueError for another structure."""
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
    if not isinstance(stored, dict) or set(map(type, stored.values())) - {Document}:
        raise ValueError(f"{where}: the docstore holds something other than documents")
    if set(map(type, index_to_id)) - {int} or set(map(type, index_to_id.values())) - {str}:
        raise ValueError(f"{where}: the position-to-id map is not {{int: str}}")
    return docstore, index_to_id


__all__ = ["ALLOWED_GLOBALS", "load_docstore"]
