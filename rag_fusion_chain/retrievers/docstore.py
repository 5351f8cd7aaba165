"""LangChain's in-memory docstore over the kit's stored documents, without a copy per ``add``."""

from typing import Any

from langchain_community.docstore.in_memory import InMemoryDocstore
from langchain_core.documents import Document


class ColumnDocstore(InMemoryDocstore):
    """``InMemoryDocstore`` whose ``add`` writes into its mapping: LangChain's makes a new dict of
    every stored Document on each ``add`` (one added to a loaded 1M store: 8-10 s, +724 MB)."""

    def add(self, texts: dict[str, Document]) -> None:
        if overlapping := [identifier for identifier in texts if identifier in self._dict]:
            raise ValueError(f"Tried to add ids that already exist: {overlapping}")
        self._dict.update(texts)

    def __reduce__(self) -> tuple[Any, ...]:  # FAISS.save_local: as LangChain's own class
        return InMemoryDocstore, (self._dict,)
