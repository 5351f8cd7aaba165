"""Pure fusion functions, one per algorithm: ranked lists and weights in, one score per distinct
document out, as ``(scores, documents)`` in first-seen order (the first appearance of each)."""

from __future__ import annotations

import functools
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from itertools import repeat
from numbers import Real
from typing import Any, cast

from langchain_core.documents import Document
from pydantic import BaseModel

from rag_fusion_chain.fusion.inputs import FUSION_SCORE_KEY, SCORE_KEY, identity
from rag_fusion_chain.validation import counted

RRF_K = 60
"""The RRF constant (Cormack et al. 2009): ``rank_constant`` in ``1 / (rank_constant + rank)``."""

Fused = tuple[list[float], list[Document]]
Lists = Sequence[Sequence[Document]]
Weights = Sequence[float]
Key = str | None
Bounds = Callable[[list[float]], tuple[float, float]]
_LARGEST = sys.float_info.max


def _accumulate(ranked_lists: Lists, contributions: list[Sequence[float]], id_key: Key) -> Fused:
    """Sum each list's per-position contribution into one score per distinct document; a document
    repeated within one list counts once, at its best position."""
    key_of = None if id_key is None else identity(id_key)
    slot_of: dict[Any, int] = {}
    scores: list[float] = []
    documents: list[Document] = []
    last_list: list[int] = []  # per slot, the last list that held it
    for list_number, (ranked, contribution) in enumerate(
        zip(ranked_lists, contributions, strict=True)
    ):
        for document, value in zip(ranked, contribution, strict=True):
            key = document.page_content if key_of is None else key_of(document)
            slot = slot_of.get(key)
            if slot is None:
                slot_of[key] = len(scores)
                scores.append(value)
                documents.append(document)
                last_list.append(list_number)
            elif last_list[slot] != list_number:
                last_list[slot] = list_number
                scores[slot] += value
    return scores, documents


def reciprocal_rank_scores(
    ranked_lists: Lists,
    weights: Weights,
    *,
    rank_constant: float = RRF_K,
    rank_start: int = 1,
    id_key: Key = None,
) -> Fused:
    """RRF: score(d) = sum of weight / (rank_constant + rank(d)), ranks from ``rank_start``."""
    first, shapes = rank_constant + rank_start, zip(weights, map(len, ranked_lists), strict=True)
    terms = [(_terms if w and n <= 10_000 else _terms.__wrapped__)(w, n, first) for w, n in shapes]
    return _accumulate(ranked_lists, terms, id_key)


@functools.lru_cache(maxsize=16, typed=True)  # skipped for 0 (== -0.0) and past 10,000 ranks
def _terms(weight: float, length: int, first: float) -> Sequence[float]:
    """RRF's ``weight / (first + rank)`` per rank, kept: a fan-out's lists keep their shape."""
    return tuple([weight / (first + rank) for rank in range(length)])


def union_scores(ranked_lists: Lists, weights: Weights, *, id_key: Key = None) -> Fused:
    """Unique union: every distinct document once, scored by the summed weight of its lists."""
    shapes = zip(weights, map(len, ranked_lists), strict=True)
    return _accumulate(ranked_lists, [[weight] * length for weight, length in shapes], id_key)


def normalize_scores(scores: list[float], bounds: tuple[float, float]) -> list[float]:
    """Scale scores from [low, high] to [0, 1]; equal bounds give 1.0 if positive else 0.0."""
    low, high = bounds
    if high == low:
        return [1.0 if high > 0 else 0.0] * len(scores)
    return [(score - low) / (high - low) for score in scores]


def _mean_three_sigma(scores: list[float]) -> tuple[float, float]:
    mean = sum(scores) / len(scores)
    sigma = math.sqrt(sum((score - mean) ** 2 for score in scores) / len(scores))
    return mean - 3 * sigma, mean + 3 * sigma


def _number(value: Any) -> float | None:
    """A score as a float, infinite or beyond the float range (10**400) as its bound; None when
    missing, NaN or not a real number (numpy's float32 is one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Real)) or value != value:
        return None
    exact = value if isinstance(value, int) else float(value)  # numpy's float32 compares as float32
    return float(max(-_LARGEST, min(_LARGEST, exact)))  # compared exactly, converted in range


def _usable_scores(
    ranked: Sequence[Document], score_key: str, list_index: int
) -> list[float | None]:
    """One list's scores, finite: missing ones None (:func:`_normalized` counts them as the
    lowest), infinite ones the largest float (so they rank first, last when negative), with a
    warning; none at all: rank-derived."""

    def warn(problem: str) -> None:
        warnings.warn(f"ranked list {list_index}: {problem}", stacklevel=9)

    raw = [_number(document.metadata.get(score_key)) for document in ranked]
    present = [score for score in raw if score is not None]
    if not present:
        warn(f"no numeric metadata[{score_key!r}]; using rank-derived scores (len - position)")
        return [float(len(ranked) - position) for position in range(len(ranked))]
    if len(present) < len(raw):
        warn(
            f"{counted(len(raw) - len(present), 'document')} with a missing or non-numeric "
            f"metadata[{score_key!r}]: given the list's lowest score"
        )
    if infinite := sum(1 for score in present if abs(score) == _LARGEST):
        warn(
            f"{counted(infinite, 'document')} with an infinite (or beyond float range) "
            f"metadata[{score_key!r}]: treated as infinite, ranked first (last if negative)"
        )
    return raw


def _normalized(scores: list[float | None], bounds_of: Bounds) -> list[float]:
    """One list's scores in [0, 1], a missing one (None) as the lowest; a constant list (min ==
    max of the present ones, tested before any arithmetic) scores 1.0 if positive else 0.0, its
    missing ones 0.0 (never above a real score). Huge scores are scaled down first (both
    normalisations are scale-invariant) so that differences and squares stay finite."""
    present = [score for score in scores if score is not None]
    lowest, highest = min(present), max(present)
    if lowest == highest:
        return [0.0 if score is None or highest <= 0 else 1.0 for score in scores]
    filled = [lowest if score is None else score for score in scores]
    largest = max(map(abs, filled))
    if largest > 1e100:
        filled = [score / largest for score in filled]
    return normalize_scores(filled, bounds_of(filled))


def _score_based(
    ranked_lists: Lists, weights: Weights, bounds_of: Bounds, score_key: str, id_key: Key
) -> Fused:
    contributions: list[Sequence[float]] = []
    for index, (ranked, weight) in enumerate(zip(ranked_lists, weights, strict=True)):
        usable = _normalized(_usable_scores(ranked, score_key, index), bounds_of) if ranked else []
        contributions.append([score * weight / len(ranked_lists) for score in usable])
    return _accumulate(ranked_lists, contributions, id_key)


def relative_scores(
    ranked_lists: Lists, weights: Weights, *, score_key: str = SCORE_KEY, id_key: Key = None
) -> Fused:
    """Relative score fusion: per-list min-max to [0, 1], times weight, over the list count, summed."""
    return _score_based(ranked_lists, weights, lambda s: (min(s), max(s)), score_key, id_key)


def distribution_based_scores(
    ranked_lists: Lists, weights: Weights, *, score_key: str = SCORE_KEY, id_key: Key = None
) -> Fused:
    """Distribution-based score fusion: as relative, with bounds mean ± 3σ (population σ)."""
    return _score_based(ranked_lists, weights, _mean_three_sigma, score_key, id_key)


_MODEL_SLOTS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
_PLAIN_DOCUMENT: type | None = (
    Document
    if BaseModel.__slots__ == _MODEL_SLOTS
    and not Document.__private_attributes__
    and Document.model_config.get("extra") != "allow"
    else None
)
"""``Document`` while its whole state is pydantic's four slots, extra and private empty, as the fast
copy below sets them (tests/test_fusion.py pins it); else ``None``: every copy by ``model_copy``."""
_new_model, _METADATA = object.__new__, frozenset({"metadata"})
_set_fields_set, _set_extra, _set_private = [  # None where pydantic differs (then unused)
    cast(Any, getattr(vars(BaseModel).get(name), "__set__", None)) for name in _MODEL_SLOTS[1:]
]


def scored_copies(
    documents: list[Document], scores: list[float], kept: Sequence[int]
) -> list[Document]:
    """Fresh copies of the ``kept`` documents with ``metadata["fusion_score"]`` (inputs untouched).
    Plain Documents are made as pydantic's ``__copy__`` makes one (a new object, its own field dict
    filled from the original's with the new metadata, its own fields set, empty extra and private),
    minus its generic work and the assignment: a third of the cost (benchmarks/results/fusion.md).
    A subclass among them (it may be frozen or hold private attributes): all by ``model_copy``."""
    copies = list(map(_new_model, repeat(Document, len(kept))))
    for set_empty in (_set_extra, _set_private):  # one C-level pass each, before the copies fill
        any(map(set_empty, copies, repeat(None)))
    for copied, slot in zip(copies, kept, strict=True):
        document = documents[slot]
        if type(document) is not _PLAIN_DOCUMENT:
            return [_public_copy(documents[slot], scores[slot]) for slot in kept]
        (fields := copied.__dict__).update(document.__dict__)  # its own dict, made on access
        metadata = fields["metadata"] = fields["metadata"].copy()
        metadata[FUSION_SCORE_KEY] = scores[slot]
        _set_fields_set(copied, document.__pydantic_fields_set__ | _METADATA)
    return copies


def _public_copy(document: Document, score: float) -> Document:
    return document.model_copy(update={"metadata": {**document.metadata, FUSION_SCORE_KEY: score}})
