"""Result fusion: merge several ranked lists of Documents into one.

Pure functions do the arithmetic (one small function per algorithm, as in ranx's ``fusion/``);
Runnables wrap them so that ``generator | retriever.map() | fusion`` just works.

Contracts (see DESIGN.md):

* **Input**: ``list[list[Document]]`` (one ranked list per query or retriever), or the nested
  ``list[list[list[Document]]]`` shaped ``[query][retriever][rank]`` that mapping several retrievers
  over several queries produces. A :class:`RankedList` carries its own weight.
* **Identity**: ``Document.id``, else ``metadata[id_key]`` when configured, else the text plus a
  canonical JSON of the metadata (without the per-list ``score`` keys), so that the same chunk from two
  retrievers merges and equal text from two different sources does not.
* **Output**: fresh copies (inputs are never mutated) with ``metadata["fusion_score"]``, sorted by score
  descending, ties broken by first appearance, cut to ``top_n``.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, ClassVar

from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from pydantic import ConfigDict, field_validator, model_validator

SCORE_KEY = "score"
FUSION_SCORE_KEY = "fusion_score"

FusionInput = Sequence[Sequence[Document]] | Sequence[Sequence[Sequence[Document]]]
FusionOutput = list[Document] | list[tuple[Document, float]]
ScoredIdentities = dict[Hashable, float]


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
# Identity
# --------------------------------------------------------------------------------------------

_IDENTITY_IGNORED_METADATA = frozenset({SCORE_KEY, FUSION_SCORE_KEY})


def _canonical_metadata(metadata: dict[str, Any], ignored: frozenset[str]) -> str:
    kept = {key: value for key, value in metadata.items() if key not in ignored} if metadata else {}
    if not kept:
        return ""
    try:
        return json.dumps(kept, sort_keys=True, ensure_ascii=False, default=repr)
    except TypeError:  # keys of mixed types cannot be sorted
        return repr(sorted(kept.items(), key=lambda item: repr(item[0])))


def identity_key(
    document: Document, id_key: str | None = None, score_key: str = SCORE_KEY
) -> Hashable:
    """The key under which fusion merges a document (cheap to compute, not meant for storage)."""
    if document.id:
        return ("id", document.id)
    if id_key is not None:
        value = document.metadata.get(id_key)
        if value is not None:
            return ("meta", str(value))
    ignored = _IDENTITY_IGNORED_METADATA | {score_key}
    return ("content", document.page_content, _canonical_metadata(document.metadata, ignored))


def document_id(document: Document, id_key: str | None = None, score_key: str = SCORE_KEY) -> str:
    """A stable string id: ``Document.id``, else ``metadata[id_key]``, else a content hash.

    >>> document_id(Document("hello", id="doc-1"))
    'doc-1'
    >>> len(document_id(Document("hello")))
    32
    """
    key = identity_key(document, id_key, score_key)
    if key[0] != "content":  # type: ignore[index]
        return str(key[1])  # type: ignore[index]
    return hashlib.blake2b(repr(key).encode("utf-8"), digest_size=16).hexdigest()


# --------------------------------------------------------------------------------------------
# Input normalisation and validation
# --------------------------------------------------------------------------------------------


def _is_document_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(item, Document) for item in value)


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
        return [float(getattr(ranked, "weight", 1.0)) for ranked in flat]
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


# --------------------------------------------------------------------------------------------
# Pure fusion functions: ranked lists in, {identity: score} plus first-seen documents out
# --------------------------------------------------------------------------------------------


def _first_occurrences(
    ranked: Sequence[Document], key_of: Callable[[Document], Hashable]
) -> Iterable[tuple[int, Hashable, Document]]:
    """Yield (position, key, document) for each document's first (best) position in one list."""
    seen: set[Hashable] = set()
    for position, document in enumerate(ranked):
        key = key_of(document)
        if key not in seen:
            seen.add(key)
            yield position, key, document


def reciprocal_rank_scores(
    ranked_lists: Sequence[Sequence[Document]],
    weights: Sequence[float],
    *,
    k: float = 60,
    rank_start: int = 1,
    key_of: Callable[[Document], Hashable] = identity_key,
) -> tuple[ScoredIdentities, dict[Hashable, Document]]:
    """RRF (Cormack et al. 2009): score(d) = sum over lists of weight / (k + rank(d)).

    >>> a, b = Document("A"), Document("B")
    >>> scores, _ = reciprocal_rank_scores([[a, b], [b, a]], [1.0, 1.0], k=60)
    >>> round(scores[identity_key(a)], 6) == round(1 / 61 + 1 / 62, 6)
    True
    """
    scores: ScoredIdentities = {}
    documents: dict[Hashable, Document] = {}
    for ranked, weight in zip(ranked_lists, weights, strict=False):
        for position, key, document in _first_occurrences(ranked, key_of):
            contribution = weight / (k + rank_start + position)
            if key in scores:
                scores[key] += contribution
            else:
                scores[key] = contribution
                documents[key] = document
    return scores, documents


def _list_scores(ranked: Sequence[Document], score_key: str) -> list[float | None]:
    """Read one list's scores; None where a score is missing or not a finite number."""
    values: list[float | None] = []
    for document in ranked:
        value = document.metadata.get(score_key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            values.append(None)
        else:
            values.append(float(value) if math.isfinite(value) else None)
    return values


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


def _score_based_scores(
    ranked_lists: Sequence[Sequence[Document]],
    weights: Sequence[float],
    bounds_of: Callable[[list[float]], tuple[float, float]],
    *,
    score_key: str,
    key_of: Callable[[Document], Hashable],
) -> tuple[ScoredIdentities, dict[Hashable, Document]]:
    scores: ScoredIdentities = {}
    documents: dict[Hashable, Document] = {}
    list_count = len(ranked_lists)
    for list_index, (ranked, weight) in enumerate(zip(ranked_lists, weights, strict=False)):
        if not ranked:
            continue
        raw = _list_scores(ranked, score_key)
        present = [score for score in raw if score is not None]
        if not present:
            warnings.warn(
                f"ranked list {list_index} has no numeric metadata[{score_key!r}]; "
                "using rank-derived scores (len - position) instead",
                stacklevel=4,
            )
            raw = [float(len(ranked) - position) for position in range(len(ranked))]
            present = raw  # type: ignore[assignment]
        elif len(present) < len(raw):
            warnings.warn(
                f"ranked list {list_index}: {len(raw) - len(present)} documents have a missing or "
                f"non-finite metadata[{score_key!r}]; they count as the list's lowest score",
                stacklevel=4,
            )
        lowest = min(present)
        filled = [lowest if score is None else score for score in raw]
        normalized = normalize_scores(filled, bounds_of(present))  # type: ignore[arg-type]
        for position, key, document in _first_occurrences(ranked, key_of):
            value = normalized[position]
            contribution = value * weight / list_count
            if key in scores:
                scores[key] += contribution
            else:
                scores[key] = contribution
                documents[key] = document
    return scores, documents


def relative_scores(
    ranked_lists: Sequence[Sequence[Document]],
    weights: Sequence[float],
    *,
    score_key: str = SCORE_KEY,
    key_of: Callable[[Document], Hashable] = identity_key,
) -> tuple[ScoredIdentities, dict[Hashable, Document]]:
    """Relative score fusion: per-list min-max to [0, 1], times weight, over the list count, summed."""
    return _score_based_scores(
        ranked_lists, weights, _min_max_bounds, score_key=score_key, key_of=key_of
    )


def distribution_based_scores(
    ranked_lists: Sequence[Sequence[Document]],
    weights: Sequence[float],
    *,
    score_key: str = SCORE_KEY,
    key_of: Callable[[Document], Hashable] = identity_key,
) -> tuple[ScoredIdentities, dict[Hashable, Document]]:
    """Distribution-based score fusion: like relative, with bounds mean ± 3σ (population σ)."""
    return _score_based_scores(
        ranked_lists, weights, _mean_three_sigma_bounds, score_key=score_key, key_of=key_of
    )


def union_scores(
    ranked_lists: Sequence[Sequence[Document]],
    weights: Sequence[float],
    *,
    key_of: Callable[[Document], Hashable] = identity_key,
) -> tuple[ScoredIdentities, dict[Hashable, Document]]:
    """Unique union: every distinct document once, scored by the summed weight of lists holding it."""
    scores: ScoredIdentities = {}
    documents: dict[Hashable, Document] = {}
    for ranked, weight in zip(ranked_lists, weights, strict=False):
        for _, key, document in _first_occurrences(ranked, key_of):
            if key in scores:
                scores[key] += weight
            else:
                scores[key] = weight
                documents[key] = document
    return scores, documents


def rank_fused(
    scores: ScoredIdentities,
    documents: dict[Hashable, Document],
    *,
    top_n: int | None = None,
    sort: bool = True,
) -> list[tuple[Document, float]]:
    """Turn fused scores into fresh Document copies carrying ``fusion_score``, best first.

    Python's sort is stable and ``scores`` is in first-seen order, so ties keep first appearance.
    """
    ordered = sorted(scores.items(), key=lambda item: -item[1]) if sort else list(scores.items())
    if top_n is not None:
        ordered = ordered[:top_n]
    fused: list[tuple[Document, float]] = []
    for key, score in ordered:
        original = documents[key]
        copy = original.model_copy(
            update={"metadata": {**original.metadata, FUSION_SCORE_KEY: score}}
        )
        fused.append((copy, score))
    return fused


# --------------------------------------------------------------------------------------------
# Runnables
# --------------------------------------------------------------------------------------------


class BaseFusion(RunnableSerializable[FusionInput, FusionOutput]):
    """Shared fields and plumbing of the fusion runnables; subclasses supply ``_scores``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str | None = "fuse"
    weights: list[float] | None = None
    """One weight per ranked list (or per retriever for nested input); default: each list's own."""
    top_n: int | None = None
    """Keep only the best ``top_n`` documents."""
    id_key: str | None = None
    """Metadata key that identifies a document when ``Document.id`` is not set."""
    with_scores: bool = False
    """Return ``(Document, score)`` pairs instead of Documents."""

    sorts_by_score: ClassVar[bool] = True

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, weights: list[float] | None) -> list[float] | None:
        if weights is not None:
            validate_weights(weights)
        return weights

    @field_validator("top_n")
    @classmethod
    def _check_top_n(cls, top_n: int | None) -> int | None:
        if top_n is not None and top_n <= 0:
            raise ValueError(f"top_n must be a positive integer or None, got {top_n}")
        return top_n

    def _scores(
        self, ranked_lists: list[Sequence[Document]], weights: list[float]
    ) -> tuple[ScoredIdentities, dict[Hashable, Document]]:
        raise NotImplementedError

    def _key_of(self) -> Callable[[Document], Hashable]:
        id_key = self.id_key
        score_key = getattr(self, "score_key", SCORE_KEY)
        if id_key is None and score_key == SCORE_KEY:
            return identity_key
        return lambda document: identity_key(document, id_key, score_key)

    def fuse(self, ranked_lists: FusionInput) -> FusionOutput:
        """Fuse without callbacks: the pure path the Runnable methods wrap."""
        flat, weights = flatten_ranked_lists(ranked_lists, self.weights)
        scores, documents = self._scores(flat, weights)
        fused = rank_fused(scores, documents, top_n=self.top_n, sort=self.sorts_by_score)
        if self.with_scores:
            return fused
        return [document for document, _ in fused]

    def invoke(
        self, input: FusionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> FusionOutput:
        return self._call_with_config(self.fuse, input, config)

    async def ainvoke(
        self, input: FusionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> FusionOutput:
        async def fuse_async(ranked_lists: FusionInput) -> FusionOutput:
            return self.fuse(ranked_lists)

        return await self._acall_with_config(fuse_async, input, config)


class ReciprocalRankFusion(BaseFusion):
    """Reciprocal rank fusion: score(d) = Σ_i w_i / (k + rank_i(d)).

    Ranks count from ``rank_start`` (1, as in Cormack et al. 2009; 0 reproduces the tutorials'
    ``1 / (rank + k)`` with 0-based ranks).

    >>> a, b, c = Document("A"), Document("B"), Document("C")
    >>> fused = ReciprocalRankFusion(with_scores=True).invoke([[a, b, c], [b, a, c]])
    >>> [document.page_content for document, _ in fused]
    ['A', 'B', 'C']
    """

    k: float = 60
    rank_start: int = 1

    @model_validator(mode="after")
    def _check_k(self) -> ReciprocalRankFusion:
        if not math.isfinite(self.k) or self.k < 0:
            raise ValueError(f"k must be a finite non-negative number, got {self.k}")
        if self.rank_start not in (0, 1):
            raise ValueError(f"rank_start must be 0 or 1, got {self.rank_start}")
        if self.k + self.rank_start <= 0:
            raise ValueError("k must be positive when rank_start=0 (1 / (0 + 0) is undefined)")
        return self

    def _scores(
        self, ranked_lists: list[Sequence[Document]], weights: list[float]
    ) -> tuple[ScoredIdentities, dict[Hashable, Document]]:
        return reciprocal_rank_scores(
            ranked_lists, weights, k=self.k, rank_start=self.rank_start, key_of=self._key_of()
        )


class RelativeScoreFusion(BaseFusion):
    """Relative score fusion: per-list min-max of ``metadata[score_key]``, weighted, averaged.

    A list without scores falls back to rank-derived scores, with a warning.
    """

    score_key: str = SCORE_KEY

    def _scores(
        self, ranked_lists: list[Sequence[Document]], weights: list[float]
    ) -> tuple[ScoredIdentities, dict[Hashable, Document]]:
        return relative_scores(
            ranked_lists, weights, score_key=self.score_key, key_of=self._key_of()
        )


class DistBasedScoreFusion(RelativeScoreFusion):
    """Distribution-based score fusion: min-max with bounds mean ± 3σ of each list's scores."""

    def _scores(
        self, ranked_lists: list[Sequence[Document]], weights: list[float]
    ) -> tuple[ScoredIdentities, dict[Hashable, Document]]:
        return distribution_based_scores(
            ranked_lists, weights, score_key=self.score_key, key_of=self._key_of()
        )


class UniqueUnion(BaseFusion):
    """The multi-query union: every distinct document once, in first-seen order.

    ``fusion_score`` is the summed weight of the lists that returned the document (its vote count
    when unweighted); the order stays first-seen, as a union is not a ranking.
    """

    sorts_by_score: ClassVar[bool] = False

    def _scores(
        self, ranked_lists: list[Sequence[Document]], weights: list[float]
    ) -> tuple[ScoredIdentities, dict[Hashable, Document]]:
        return union_scores(ranked_lists, weights, key_of=self._key_of())


reciprocal_rank_fusion = ReciprocalRankFusion()
relative_score_fusion = RelativeScoreFusion()
dist_based_score_fusion = DistBasedScoreFusion()
unique_union = UniqueUnion()

FUSIONS: dict[str, type[BaseFusion]] = {
    "rrf": ReciprocalRankFusion,
    "relative": RelativeScoreFusion,
    "dist": DistBasedScoreFusion,
    "union": UniqueUnion,
}
"""Fusion classes by short name, for configuration files and the command line."""

__all__ = [
    "FUSIONS",
    "FUSION_SCORE_KEY",
    "SCORE_KEY",
    "BaseFusion",
    "DistBasedScoreFusion",
    "RankedList",
    "ReciprocalRankFusion",
    "RelativeScoreFusion",
    "UniqueUnion",
    "dist_based_score_fusion",
    "distribution_based_scores",
    "document_id",
    "flatten_ranked_lists",
    "identity_key",
    "normalize_scores",
    "rank_fused",
    "reciprocal_rank_fusion",
    "reciprocal_rank_scores",
    "relative_score_fusion",
    "relative_scores",
    "union_scores",
    "unique_union",
    "validate_weights",
]
