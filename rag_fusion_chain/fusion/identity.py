"""Document identity in fusion: the passage text, or a key the user names."""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document

from rag_fusion_chain.fusion.ranked_lists import FUSION_SCORE_KEY, SCORE_KEY

# --------------------------------------------------------------------------------------------
# Identity
# --------------------------------------------------------------------------------------------

DOCUMENT_ID = "Document.id"
"""``id_key`` value that identifies documents by ``Document.id`` (any other value names a metadata
key, as ``id_key`` does in LangChain's ``EnsembleRetriever``)."""


class IdentityIndex:
    """Gives each distinct document a slot number, in first-seen order.

    Identity is the text (the default), or with ``id_key`` the value of ``metadata[id_key]``, as in
    LangChain (``Document.id`` for ``id_key=DOCUMENT_ID``); a document lacking that key is
    identified by its text. The document registered for a slot is its first appearance.

    >>> index = IdentityIndex()
    >>> index.slot(Document("a", id="x")), index.slot(Document("a", metadata={"source": "other"}))
    (0, 0)
    >>> IdentityIndex(id_key=DOCUMENT_ID).slot(Document("b", id="x"))
    0
    """

    def __init__(self, id_key: str | None = None) -> None:
        self.id_key = id_key
        self.documents: list[Document] = []
        self._by_key: dict[Any, int] = {}
        self._last_list: list[int] = []
        """Per slot, the number of the last ranked list that held it (to spot in-list repeats)."""
        self._lists = 0
        self._warned = False

    def key(self, document: Document) -> Any:
        """The identity of ``document``: its text, or a ``(id_key, value)`` pair."""
        if self.id_key is None:
            return document.page_content
        if self.id_key == DOCUMENT_ID:
            value = document.id
        else:
            value = document.metadata.get(self.id_key)
            if value is None and self.id_key == "id" and document.id:
                self._warn_about_document_id()
        if value is None or (isinstance(value, str) and not value):
            return document.page_content
        try:
            hash(value)
        except TypeError:  # a list or dict in metadata: compare its canonical form
            value = json.dumps(value, sort_keys=True, default=repr)
        return (self.id_key, value)  # a tuple never equals a text

    def _warn_about_document_id(self) -> None:
        """Once per fusion: ``id_key="id"`` used to mean ``Document.id`` in this kit."""
        if not self._warned:
            self._warned = True
            warnings.warn(
                'id_key="id" names metadata["id"] (as in LangChain); these documents have a '
                "Document.id but no metadata['id'], so they are identified by their text. "
                f"For identity by Document.id pass id_key={DOCUMENT_ID!r} (fusion.DOCUMENT_ID).",
                stacklevel=4,
            )

    def slot(self, document: Document) -> int:
        """The slot of ``document``, registering it when first seen."""
        return self.slots([document])[0]

    def slots(self, ranked: Sequence[Document]) -> list[int]:
        """The slot of each document of a ranked list; -1 for a document that already appeared
        higher in the same list (it counts once, at its best rank).

        The hot path of every fusion (once per document of every list), hence one flat loop.
        """
        by_key, documents, last_list = self._by_key, self.documents, self._last_list
        key_of = None if self.id_key is None else self.key
        list_number = self._lists = self._lists + 1
        result: list[int] = []
        for document in ranked:
            key = document.page_content if key_of is None else key_of(document)
            slot = by_key.get(key, -1)
            if slot < 0:
                slot = by_key[key] = len(documents)
                documents.append(document)
                last_list.append(list_number)
            elif last_list[slot] == list_number:
                slot = -1
            else:
                last_list[slot] = list_number
            result.append(slot)
        return result


def document_id(document: Document, id_key: str | None = None, score_key: str = SCORE_KEY) -> str:
    """A stable string id: ``Document.id``, else ``metadata[id_key]``, else a content hash.

    The hash covers the text and a canonical JSON of the metadata without score keys, so it is the
    same across processes and retrievers: the kit's stores give it to chunks as their id. (Fusion
    identifies documents by text unless told otherwise: see :class:`IdentityIndex`.)

    >>> document_id(Document("hello", id="doc-1"))
    'doc-1'
    >>> document_id(Document("t", metadata={"score": 1})) == document_id(Document("t"))
    True
    """
    if document.id:
        return document.id
    if id_key is not None and document.metadata.get(id_key) is not None:
        return str(document.metadata[id_key])
    ignored = (SCORE_KEY, FUSION_SCORE_KEY, score_key)
    metadata = {name: value for name, value in document.metadata.items() if name not in ignored}
    canonical = json.dumps(
        [document.page_content, metadata], sort_keys=True, ensure_ascii=False, default=repr
    )
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=16).hexdigest()
