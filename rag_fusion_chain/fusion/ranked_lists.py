"""Fusion input: ranked lists of Documents, their weights, and the score keys.

>>> flatten_ranked_lists([[Document("a")], [Document("b")]], [1.0, 2.0])[1]
[1.0, 2.0]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any

from langchain_core.documents import Document

SCORE_KEY = "score"
FUSION_SCORE_KEY = "fusion_score"

FusionInput = Sequence[Sequence[Document]] | Sequence[Sequence[Sequence[Document]]]
FusionOutput = list[Document] | list[tuple[Document, float]]


class RankedList(list):  # type: ignore[type-arg]
    """A ranked ``list[Document]`` that also knows its weight and where it came from.

    It is a plain list everywhere else, so code that expects ``retriever.map()`` output keeps working.

    >>> ranked = RankedList([Document("a")], weight=2.0, query="q", source="bm25")
    >>> ranked.weight, len(ranked)
    (2.0, 1)
    """

    def __init__(
        self,
        documents: Iterable[Document] = (),
        *,
        weight: float = 1.0,
        query: str | None = None,
        source: str | None = None,
    ) -> None:
        super().__init__(documents)
        self.weight = weight
        self.query = query
        self.source = source

    def __repr__(self) -> str:
        return f"RankedList({list.__repr__(self)}, weight={self.weight!r}, source={self.source!r})"


# --------------------------------------------------------------------------------------------
# Input normalisation and validation
# --------------------------------------------------------------------------------------------


def _is_document_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(map(isinstance, value, repeat(Document)))


def flatten_ranked_lists(
    ranked_lists: FusionInput, weights: Sequence[float] | None = None
) -> tuple[list[Sequence[Document]], list[float]]:
    """Normalise fusion input to a flat list of ranked lists and one weight per list.

    Nested input is ``[query][retriever][rank]``; ``weights`` may then give one weight per
    retriever (applied to that retriever's list for every query) or one per flattened list.
    Without explicit weights, a :class:`RankedList`'s own ``weight`` is used, else 1.0.
    """
    if isinstance(ranked_lists, (str, bytes, Document)) or not isinstance(
        ranked_lists, (list, tuple)
    ):
        raise TypeError(
            "fusion input must be a list of ranked lists of Documents, "
            f"got {type(ranked_lists).__name__}"
        )
    flat: list[Sequence[Document]] = []
    retriever_index: list[int] = []
    for position, item in enumerate(ranked_lists):
        if isinstance(item, Document):
            raise TypeError(
                "fusion input must be a list of ranked lists, got a single list of Documents; "
                "wrap it: [documents]"
            )
        if _is_document_list(item):
            flat.append(item)
            retriever_index.append(-1)
        elif isinstance(item, (list, tuple)) and all(_is_document_list(inner) for inner in item):
            for index, inner in enumerate(item):
                flat.append(inner)
                retriever_index.append(index)
        else:
            raise TypeError(
                f"fusion input item {position} is not a list of Documents "
                f"(got {type(item).__name__}); expected list[list[Document]] "
                "or list[list[list[Document]]]"
            )
    return flat, _resolve_weights(flat, retriever_index, weights)


def _resolve_weights(
    flat: list[Sequence[Document]], retriever_index: list[int], weights: Sequence[float] | None
) -> list[float]:
    if weights is None:
        own = [float(getattr(ranked, "weight", 1.0)) for ranked in flat]
        for position, weight in enumerate(own):
            if not math.isfinite(weight) or weight < 0:  # a RankedList built by hand
                raise ValueError(
                    f"weights: ranked list {position} carries weight {weight!r}; "
                    "RankedList weights must be finite and non-negative"
                )
        return own
    validate_weights(weights)
    if len(weights) == len(flat):
        return [float(weight) for weight in weights]
    retrievers = max(retriever_index, default=-1) + 1
    if retrievers and min(retriever_index) >= 0 and len(weights) == retrievers:
        return [float(weights[index]) for index in retriever_index]
    raise ValueError(
        f"weights: got {len(weights)} weights for {len(flat)} ranked lists"
        + (f" from {retrievers} retrievers" if retrievers else "")
        + "; give one weight per list (or per retriever for nested input)"
    )


def validate_weights(weights: Sequence[float]) -> None:
    """Raise ValueError unless weights are finite, non-negative and not all zero."""
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise TypeError(f"weights must be a sequence of numbers, got {type(weights).__name__}")
    for weight in weights:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise TypeError(f"weights must be numbers, got {weight!r}")
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"weights must be finite and non-negative, got {weight!r}")
    if weights and not any(weights):
        raise ValueError("weights must not all be zero")
