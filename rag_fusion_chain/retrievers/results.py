"""What a fan-out returns: ranked lists plus the failures it recorded, never swallowed.

>>> from rag_fusion_chain.fusion import RankedList
>>> results = RetrievalResults([RankedList([Document("a")], source="bm25")], queries=["a"])
>>> len(results), results.failures, results.queries
(1, [], ['a'])
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import Document

from rag_fusion_chain.fusion import RankedList

Outcome = list[Document] | BaseException
"""What one (query, retriever) pair gave: its documents, or the error it raised."""


@dataclass(frozen=True)
class RetrievalFailure:
    """One (query, retriever) pair that raised or timed out: kept in the output, never swallowed.

    >>> RetrievalFailure(source="bm25", query="solar", error="TimeoutError: no answer within 2 s")
    RetrievalFailure(source='bm25', query='solar', error='TimeoutError: no answer within 2 s')
    """

    source: str
    query: str
    error: str


class RetrievalResults(list):  # type: ignore[type-arg]
    """The fan-out output: :class:`RankedList` s, query-major then retriever, plus ``failures``
    and the ``queries`` searched, in order.

    A plain list everywhere else, so every fusion runnable takes it as is.
    """

    def __init__(
        self,
        ranked_lists: Iterable[RankedList] = (),
        *,
        failures: Iterable[RetrievalFailure] = (),
        queries: Iterable[str] = (),
    ) -> None:
        super().__init__(ranked_lists)
        self.failures: list[RetrievalFailure] = list(failures)
        self.queries: list[str] = list(queries)

    def __repr__(self) -> str:
        return (
            f"RetrievalResults({list.__repr__(self)}, failures={self.failures!r}, "
            f"queries={self.queries!r})"
        )


class RetrievalError(RuntimeError):
    """Raised when no retriever returned anything: there is nothing left to fuse."""

    def __init__(self, failures: Sequence[RetrievalFailure]) -> None:
        self.failures = list(failures)
        details = "; ".join(f"{failure.source} ({failure.error})" for failure in self.failures)
        super().__init__(f"every retriever failed: {details}")


def describe_error(error: BaseException) -> str:
    """``"TypeName: message"``, the form failures are recorded in.

    >>> describe_error(TimeoutError("no answer within 2 s"))
    'TimeoutError: no answer within 2 s'
    """
    return f"{type(error).__name__}: {error}"


def checked_documents(result: Any) -> Outcome:
    """A retriever's result as an outcome: its Documents, its error, or a TypeError for anything
    else (a retriever returning a string, say)."""
    if isinstance(result, BaseException):
        return result
    if isinstance(result, (list, tuple)) and all(isinstance(item, Document) for item in result):
        return list(result)
    return TypeError(f"a retriever must return a list of Documents, got {type(result).__name__}")


def warn_about(failures: list[RetrievalFailure], query_count: int) -> None:
    """One warning per failing retriever, naming it, with its first error."""
    by_source: dict[str, list[RetrievalFailure]] = {}
    for failure in failures:
        by_source.setdefault(failure.source, []).append(failure)
    for source, source_failures in by_source.items():
        warnings.warn(
            f"retriever {source!r} failed for {len(source_failures)} of {query_count} queries "
            f"({source_failures[0].error}); fusing the results of the others",
            stacklevel=4,
        )


__all__ = [
    "Outcome",
    "RetrievalError",
    "RetrievalFailure",
    "RetrievalResults",
    "checked_documents",
    "describe_error",
    "warn_about",
]
