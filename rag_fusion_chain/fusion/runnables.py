"""The fusion Runnables: thin wrappers over :mod:`~rag_fusion_chain.fusion.scores` that report a
``fuse`` run and honour per-call settings."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from langchain_core.runnables.config import (
    ensure_config,
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
)
from pydantic import ConfigDict, field_validator, model_validator

from rag_fusion_chain.fusion.identity import IdentityIndex
from rag_fusion_chain.fusion.ranked_lists import (
    SCORE_KEY,
    FusionInput,
    FusionOutput,
    flatten_ranked_lists,
    validate_weights,
)
from rag_fusion_chain.fusion.scores import (
    RRF_K,
    FusedScores,
    distribution_based_scores,
    rank_fused,
    reciprocal_rank_scores,
    relative_scores,
    union_scores,
)

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
    """Identify documents by this metadata key (``"id"``: by ``Document.id``) instead of by text."""
    with_scores: bool = False
    """Return ``(Document, score)`` pairs instead of Documents."""

    sorts_by_score: ClassVar[bool] = True
    call_settings: ClassVar[tuple[str, ...]] = ("top_n", "weights")
    """Fields that ``invoke(..., **settings)`` and ``.bind(**settings)`` may set per call."""

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

    def _scores(self, ranked_lists: list[Sequence[Document]], weights: list[float]) -> FusedScores:
        raise NotImplementedError

    def _index(self) -> IdentityIndex:
        return IdentityIndex(self.id_key)

    def with_settings(self, **settings: Any) -> BaseFusion:
        """This fusion with per-call ``settings`` applied and validated like the fields.

        Raises TypeError naming any keyword that is not one of :attr:`call_settings`, so that a
        setting is never silently ignored.

        >>> ReciprocalRankFusion().with_settings(top_n=3).top_n
        3
        """
        if not settings:
            return self
        unknown = sorted(set(settings) - set(self.call_settings))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} got unexpected keyword argument(s) "
                f"{', '.join(map(repr, unknown))}; settings it takes per call: "
                f"{', '.join(self.call_settings)}"
            )
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        return type(self)(**{**fields, **settings})

    def fuse(self, ranked_lists: FusionInput) -> FusionOutput:
        """Fuse without callbacks: the pure path the Runnable methods wrap."""
        flat, weights = flatten_ranked_lists(ranked_lists, self.weights)
        fused = rank_fused(self._scores(flat, weights), top_n=self.top_n, sort=self.sorts_by_score)
        if self.with_scores:
            return fused
        return [document for document, _ in fused]

    def _run_identity(self, config: RunnableConfig) -> dict[str, Any]:
        """The run's name and id for ``on_chain_start`` (a given run id belongs to one run only)."""
        return {
            "name": config.get("run_name") or self.get_name(),
            "run_id": config.pop("run_id", None),
        }

    def invoke(
        self, input: FusionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> FusionOutput:
        # A leaf step: it reports its run to the callbacks but starts no child runnables, so it
        # skips ``_call_with_config``'s child context and per-call signature inspection (about
        # 0.1 ms a call, some 5% of fusing 10 x 100 documents).
        config = ensure_config(config)
        run_manager = get_callback_manager_for_config(config).on_chain_start(
            None, input, **self._run_identity(config)
        )
        try:
            output = self.with_settings(**kwargs).fuse(input)
        except BaseException as error:
            run_manager.on_chain_error(error)
            raise
        run_manager.on_chain_end(output)
        return output

    async def ainvoke(
        self, input: FusionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> FusionOutput:
        config = ensure_config(config)
        run_manager = await get_async_callback_manager_for_config(config).on_chain_start(
            None, input, **self._run_identity(config)
        )
        try:
            output = self.with_settings(**kwargs).fuse(input)
        except BaseException as error:
            await run_manager.on_chain_error(error)
            raise
        await run_manager.on_chain_end(output)
        return output


class ReciprocalRankFusion(BaseFusion):
    """Reciprocal rank fusion: score(d) = Σ_i w_i / (k + rank_i(d)).

    Ranks count from ``rank_start`` (1, as in Cormack et al. 2009; 0 reproduces the tutorials'
    ``1 / (rank + k)`` with 0-based ranks).

    >>> a, b, c = Document("A"), Document("B"), Document("C")
    >>> fused = ReciprocalRankFusion(with_scores=True).invoke([[a, b, c], [b, a, c]])
    >>> [document.page_content for document, _ in fused]
    ['A', 'B', 'C']
    """

    k: float = RRF_K
    rank_start: int = 1

    call_settings: ClassVar[tuple[str, ...]] = ("top_n", "weights", "k")

    @model_validator(mode="after")
    def _check_k(self) -> ReciprocalRankFusion:
        if not math.isfinite(self.k) or self.k < 0:
            raise ValueError(f"k must be a finite non-negative number, got {self.k}")
        if self.rank_start not in (0, 1):
            raise ValueError(f"rank_start must be 0 or 1, got {self.rank_start}")
        if self.k + self.rank_start <= 0:
            raise ValueError("k must be positive when rank_start=0 (1 / (0 + 0) is undefined)")
        return self

    def _scores(self, ranked_lists: list[Sequence[Document]], weights: list[float]) -> FusedScores:
        return reciprocal_rank_scores(
            ranked_lists, weights, k=self.k, rank_start=self.rank_start, index=self._index()
        )


class RelativeScoreFusion(BaseFusion):
    """Relative score fusion: per-list min-max of ``metadata[score_key]``, weighted, averaged.

    A list without scores falls back to rank-derived scores, with a warning.
    """

    score_key: str = SCORE_KEY

    def _scores(self, ranked_lists: list[Sequence[Document]], weights: list[float]) -> FusedScores:
        return relative_scores(ranked_lists, weights, score_key=self.score_key, index=self._index())


class DistBasedScoreFusion(RelativeScoreFusion):
    """Distribution-based score fusion: min-max with bounds mean ± 3σ of each list's scores."""

    def _scores(self, ranked_lists: list[Sequence[Document]], weights: list[float]) -> FusedScores:
        return distribution_based_scores(
            ranked_lists, weights, score_key=self.score_key, index=self._index()
        )


class UniqueUnion(BaseFusion):
    """The multi-query union: every distinct document once, in first-seen order.

    ``fusion_score`` is the summed weight of the lists that returned the document (its vote count
    when unweighted); the order stays first-seen, as a union is not a ranking.
    """

    sorts_by_score: ClassVar[bool] = False

    def _scores(self, ranked_lists: list[Sequence[Document]], weights: list[float]) -> FusedScores:
        return union_scores(ranked_lists, weights, index=self._index())


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
