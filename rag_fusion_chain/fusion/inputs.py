"""Fusion input: ranked lists, their weights, the score keys and document identity."""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import Any, TypeGuard

from langchain_core.documents import Document

from rag_fusion_chain.validation import counted

SCORE_KEY = "score"
FUSION_SCORE_KEY = "fusion_score"
DOCUMENT_ID = "Document.id"
"""``id_key`` for identity by ``Document.id`` (any other value names a metadata key)."""

FusionInput = Sequence[Sequence[Document]] | Sequence[Sequence[Sequence[Document]]]
FusionOutput = list[Document] | list[tuple[Document, float]]


class RankedList(list):  # type: ignore[type-arg]
    """A ranked ``list[Document]`` that also knows its weight, query and source."""

    def __init__(
        self,
        documents: Iterable[Document] = (),
        *,
        weight: float = 1.0,
        query: str | None = None,
        source: str | None = None,
    ) -> None:
        super().__init__(documents)
        self.weight, self.query, self.source = weight, query, source

    def __repr__(self) -> str:
        return f"RankedList({list.__repr__(self)}, weight={self.weight!r}, source={self.source!r})"


def validate_weights(weights: Sequence[float]) -> Sequence[float]:
    """``weights``; ValueError unless finite, non-negative and not all zero."""
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise TypeError(f"weights must be a sequence of numbers, got {type(weights).__name__}")
    for weight in weights:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise TypeError(f"weights must be numbers, got {weight!r}")
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"weights must be finite and non-negative, got {weight!r}")
    if weights and not any(weights):
        raise ValueError("weights must not all be zero")
    return weights


def is_document_list(value: Any) -> TypeGuard[Sequence[Document]]:
    """Whether ``value`` is one ranked list: a list or tuple of Documents only (or empty)."""
    return isinstance(value, (list, tuple)) and all(map(isinstance, value, repeat(Document)))


def flatten(
    ranked_lists: FusionInput, weights: Sequence[float] | None = None
) -> tuple[list[Sequence[Document]], list[float]]:
    """Flat ranked lists and one weight each (given per list or per retriever, else their own)."""
    flat: list[Sequence[Document]]
    retriever_of: list[int]  # per flat list, its retriever's position in a nested item, else -1
    if isinstance(ranked_lists, (list, tuple)) and all(map(is_document_list, ranked_lists)):
        flat, retriever_of = list(ranked_lists), [-1] * len(ranked_lists)  # a fan-out's: no walk
    elif not isinstance(ranked_lists, (list, tuple)):
        raise TypeError(
            "fusion input must be a list of ranked lists of Documents, "
            f"got {type(ranked_lists).__name__}"
        )
    else:
        flat, retriever_of = [], []
        for position, item in enumerate(ranked_lists):
            if is_document_list(item):
                flat.append(item)
                retriever_of.append(-1)
            elif isinstance(item, (list, tuple)) and all(map(is_document_list, item)):
                flat.extend(item)
                retriever_of.extend(range(len(item)))
            elif isinstance(item, Document):
                raise TypeError(
                    "fusion input must be a list of ranked lists, got a single list of Documents; "
                    "wrap it: [documents]"
                )
            else:
                raise TypeError(
                    f"fusion input item {position} is not a list of Documents "
                    f"(got {type(item).__name__}); expected list[list[Document]] "
                    "or list[list[list[Document]]]"
                )
    if weights is None:
        own = [float(getattr(ranked, "weight", 1.0)) for ranked in flat]
        if not all(map(math.isfinite, own)) or min(own, default=0.0) < 0:
            position, weight = next((at, w) for at, w in enumerate(own) if not 0 <= w < math.inf)
            raise ValueError(
                f"weights: ranked list {position} carries weight {weight!r}; "
                "RankedList weights must be finite and non-negative"
            )
        return flat, own
    if len(weights) == len(flat):  # validated by the fusion's field
        return flat, [float(weight) for weight in weights]
    retrievers = max(retriever_of, default=-1) + 1
    if retrievers and min(retriever_of) >= 0 and len(weights) == retrievers:
        return flat, [float(weights[index]) for index in retriever_of]
    raise ValueError(
        f"weights: got {counted(len(weights), 'weight')} for {counted(len(flat), 'ranked list')}"
        + (f" from {counted(retrievers, 'retriever')}" if retrievers else "")
        + "; give one weight per list (or per retriever for nested input)"
    )


def identity(id_key: str) -> Callable[[Document], Any]:
    """A document's fusion identity: ``(id_key, value)``, else its text (no ``id_key``: its text)."""
    warned = False

    def key(document: Document) -> Any:
        nonlocal warned
        value = document.id if id_key == DOCUMENT_ID else document.metadata.get(id_key)
        if value is None and id_key == "id" and document.id and not warned:
            warned = True  # id_key="id" meant Document.id in this kit before 0.2
            warnings.warn(
                'id_key="id" names metadata["id"] (as in LangChain); these documents have a '
                "Document.id but no metadata['id'], so they are identified by their text. "
                f"For identity by Document.id pass id_key={DOCUMENT_ID!r} (fusion.DOCUMENT_ID).",
                stacklevel=8,
            )
        if value is None or (isinstance(value, str) and not value):
            return document.page_content
        try:
            hash(value)
        except TypeError:  # a list or dict in metadata: compare its canonical form
            value = json.dumps(value, sort_keys=True, default=repr)
        return (id_key, value)  # a tuple never equals a text

    return key


def document_id(document: Document) -> str:
    """A stable string id: ``Document.id``, else a content hash of the text and metadata without
    the score keys (the kit's chunk ids, the same in every process)."""
    if document.id:
        return document.id
    ignored = (SCORE_KEY, FUSION_SCORE_KEY)
    metadata = {name: value for name, value in document.metadata.items() if name not in ignored}
    canonical = json.dumps(
        [document.page_content, metadata], sort_keys=True, ensure_ascii=False, default=repr
    )
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=16).hexdigest()
