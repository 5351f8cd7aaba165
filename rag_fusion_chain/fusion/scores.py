"""Pure fusion functions: ranked lists in, one score per distinct document (in slot order) out,
and the fused copies ranked by those scores."""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.documents import Document

from rag_fusion_chain.fusion.identity import IdentityIndex
from rag_fusion_chain.fusion.ranked_lists import FUSION_SCORE_KEY, SCORE_KEY

RRF_K = 60
"""The RRF constant's default (Cormack et al. 2009): the ``k`` in ``1 / (k + rank)``."""

# --------------------------------------------------------------------------------------------
# Pure fusion functions: ranked lists in, one score per distinct document (in slot order) out
# --------------------------------------------------------------------------------------------

FusedScores = tuple[list[float], list[Document]]
"""Scores by slot, and the first-seen document of each slot (see :class:`IdentityIndex`)."""


def _slot_lists(
    ranked_lists: Sequence[Sequence[Document]], index: IdentityIndex
) -> tuple[list[list[int]], list[float]]:
    """Every list's slots (see :meth:`IdentityIndex.slots`), and a zero score per distinct slot."""
    slot_lists = [index.slots(ranked) for ranked in ranked_lists]
    return slot_lists, [0.0] * len(index.documents)


def reciprocal_rank_scores(
    ranked_lists: Sequence[Sequence[Document]],
    weights: Sequence[float],
    *,
    k: float = RRF_K,
    rank_start: int = 1,
    index: IdentityIndex | None = None,
) -> FusedScores:
    """RRF (Cormack et al. 2009): score(d) = sum over lists of weight / (k + rank(d)).

    >>> scores, documents = reciprocal_rank_scores(
    ...     [[Document("A"), Document("B")], [Document("B"), Document("A")]], [1.0, 1.0]
    ... )
    >>> scores[0] == 1 / 61 + 1 / 62
    True
    """
    index = index or IdentityIndex()
    slot_lists, scores = _slot_lists(ranked_lists, index)
    first_rank = k + rank_start
    for slots, weight in zip(slot_lists, weights, strict=True):
        for position, slot in enumerate(slots):
            if slot >= 0:
                scores[slot] += weight / (first_rank + position)
    return scores, index.documents


def _score_of(value: Any) -> float | None:
    """A score as a float: None when missing or not a number (NaN included); a number beyond the
    float range (``10**400``) is infinite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        number = math.inf if value > 0 else -math.inf
    return None if math.isnan(number) else number


_LARGEST_FLOAT = sys.float_info.max


def _usable_scores(ranked: Sequence[Document], score_key: str, list_index: int) -> list[float]:
    """One list's scores, finite: missing ones filled in, infinite ones clamped, with a warning.

    A missing or non-numeric score counts as the list's lowest. An infinite score (or one too
    large for a float) counts as the largest float, so after normalisation it ranks first (last
    when negative) while the arithmetic stays finite.
    """
    raw = [_score_of(document.metadata.get(score_key)) for document in ranked]
    present = [score for score in raw if score is not None]
    if not present:
        warnings.warn(
            f"ranked list {list_index} has no numeric metadata[{score_key!r}]; "
            "using rank-derived scores (len - position) instead",
            stacklevel=5,
        )
        return [float(len(ranked) - position) for position in range(len(ranked))]
    if len(present) < len(raw):
        warnings.warn(
            f"ranked list {list_index}: {len(raw) - len(present)} documents have a missing or "
            f"non-numeric metadata[{score_key!r}]; they count as the list's lowest score",
            stacklevel=5,
        )
    infinite = sum(1 for score in present if math.isinf(score))
    if infinite:
        warnings.warn(
            f"ranked list {list_index}: {infinite} documents have an infinite (or beyond float "
            f"range) metadata[{score_key!r}]; treated as infinite: ranked first (last if negative)",
            stacklevel=5,
        )
        raw = [
            None if score is None else max(-_LARGEST_FLOAT, min(_LARGEST_FLOAT, score))
            for score in raw
        ]
    lowest = min(score for score in raw if score is not None)
    return [lowest if score is None else score for score in raw]


_LARGE_SCORE = 1e100
"""Beyond this magnitude, differences and squares of scores could overflow to inf."""


def _scaled_down(scores: list[float]) -> list[float]:
    """Scores divided by the largest magnitude when that is huge, else unchanged.

    Min-max and mean ± 3σ normalisation are scale-invariant, so the normalised scores are the
    same; only the arithmetic stays finite (``1e308 - -1e308`` is inf, and inf / inf is NaN).
    """
    largest = max(map(abs, scores), default=0.0)
    return [score / largest for score in scores] if largest > _LARGE_SCORE else scores


def _min_max_bounds(scores: list[float]) -> tuple[float, float]:
    return min(scores), max(scores)


def _mean_three_sigma_bounds(scores: list[float]) -> tuple[float, float]:
    mean = sum(scores) / len(scores)
    sigma = math.sqrt(sum((score - mean) ** 2 for score in scores) / len(scores))
    return mean - 3 * sigma, mean + 3 * sigma


def normalize_scores(scores: list[float], bounds: tuple[float, float]) -> list[float]:
    """Scale scores to [low, high] -> [0, 1]; equal bounds give 1.0 if positive else 0.0.

    >>> normalize_scores([2.0, 4.0, 3.0], (2.0, 4.0))
    [0.0, 1.0, 0.5]
    """
    low, high = bounds
    if high == low:
        return [1.0 if high > 0 else 0.0 for _ in scores]
    return [(score - low) / (high - low) for score in scores]


def normalized_list_scores(
    scores: list[float], bounds_of: Callable[[list[float]], tuple[float, float]]
) -> list[float]:
    """One list's scores normalised to [0, 1] between ``bounds_of(scores)``.

    A constant list (min == max, tested exactly, before any arithmetic) has no spread to
    normalise: every document scores 1.0 when the value is positive, else 0.0, whatever the value
    and the length (``bounds_of`` would see float noise as a tiny σ).

    >>> normalized_list_scores([0.7] * 7, _mean_three_sigma_bounds)
    [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    """
    highest = max(scores)
    if min(scores) == highest:
        return [1.0 if highest > 0 else 0.0] * len(scores)
    scaled = _scaled_down(scores)
    return normalize_scores(scaled, bounds_of(scaled))


def _score_based_scores(
    ranked_lists: Sequence[Sequence[Document]],
    weights: Sequence[float],
    bounds_of: Callable[[list[float]], tuple[float, float]],
    score_key: str,
    index: IdentityIndex | None,
) -> FusedScores:
    index = index or IdentityIndex()
    slot_lists, scores = _slot_lists(ranked_lists, index)
    list_count = len(ranked_lists)
    for list_index, (ranked, slots, weight) in enumerate(
        zip(ranked_lists, slot_lists, weights, strict=True)
    ):
        if not ranked:
            continue
        normalized = normalized_list_scores(
            _usable_scores(ranked, score_key, list_index), bounds_of
        )
        for position, slot in enumerate(slots):
            if slot >= 0:
                scores[slot] += normalized[position] * weight / list_count
    return scores, index.documents


def relative_scores(
    ranked_lists: Sequence[Sequence[Document]],
    weights: Sequence[float],
    *,
    score_key: str = SCORE_KEY,
    index: IdentityIndex | None = None,
) -> FusedScores:
    """Relative score fusion: per-list min-max to [0, 1], times weight, over the list count, summed.

    >>> scores, _ = relative_scores([[Document("A", metadata={"score": 9}),
    ...                               Document("B", metadata={"score": 1})]], [1.0])
    >>> scores
    [1.0, 0.0]
    """
    return _score_based_scores(ranked_lists, weights, _min_max_bounds, score_key, index)


def distribution_based_scores(
    ranked_lists: Sequence[Sequence[Document]],
    weights: Sequence[float],
    *,
    score_key: str = SCORE_KEY,
    index: IdentityIndex | None = None,
) -> FusedScores:
    """Distribution-based score fusion: like relative, with bounds mean ± 3σ (population σ)."""
    return _score_based_scores(ranked_lists, weights, _mean_three_sigma_bounds, score_key, index)


def union_scores(
    ranked_lists: Sequence[Sequence[Document]],
    weights: Sequence[float],
    *,
    index: IdentityIndex | None = None,
) -> FusedScores:
    """Unique union: every distinct document once, scored by the summed weight of lists holding it."""
    index = index or IdentityIndex()
    slot_lists, scores = _slot_lists(ranked_lists, index)
    for slots, weight in zip(slot_lists, weights, strict=True):
        for slot in slots:
            if slot >= 0:
                scores[slot] += weight
    return scores, index.documents


def _copy_with_score(document: Document, score: float) -> Document:
    """A fresh copy carrying ``fusion_score`` (the input document is left untouched).

    ``model_copy`` (public pydantic API) copies fields that are already valid without validating
    them again, keeps subclasses and their extra fields, and is the cheapest public way measured
    (``model_construct`` and ``Document(...)`` cost more per copy).
    """
    return document.model_copy(update={"metadata": {**document.metadata, FUSION_SCORE_KEY: score}})


def rank_fused(
    fused_scores: FusedScores, *, top_n: int | None = None, sort: bool = True
) -> list[tuple[Document, float]]:
    """Turn fused scores into fresh Document copies carrying ``fusion_score``, best first.

    Python's sort is stable and slots are in first-seen order, so ties keep first appearance.
    """
    scores, documents = fused_scores
    slots = (
        sorted(range(len(scores)), key=scores.__getitem__, reverse=True)
        if sort
        else range(len(scores))
    )
    if top_n is not None:
        slots = slots[:top_n]
    return [(_copy_with_score(documents[slot], scores[slot]), scores[slot]) for slot in slots]
