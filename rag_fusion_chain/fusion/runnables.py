"""The fusion Runnables: thin wrappers over :mod:`.algorithms` that report a ``fuse`` run and
take ``top_n`` / ``weights`` (and RRF's ``rank_constant``) per call."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Annotated, Any, ClassVar, Literal

from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.config import (
    ensure_config,
    get_callback_manager_for_config,
    patch_config,
    set_config_context,
)
from pydantic import BaseModel, BeforeValidator, Field, model_validator

from rag_fusion_chain.fusion import algorithms, inputs
from rag_fusion_chain.fusion.algorithms import Fused
from rag_fusion_chain.fusion.inputs import FUSION_SCORE_KEY, SCORE_KEY, FusionInput, FusionOutput


class BaseFusion(RunnableSerializable[FusionInput, FusionOutput]):
    """Shared fields and plumbing of the fusion runnables; each names its :mod:`.algorithms`
    function (``scorer``) and the fields passed to it as keywords (``scorer_fields``)."""

    name: str | None = "fuse"
    weights: Annotated[list[float], BeforeValidator(inputs.validate_weights)] | None = None
    """One weight per ranked list (or per retriever for nested input); default: each list's own."""
    top_n: int | None = Field(default=None, gt=0, strict=True)  # True is no count
    id_key: str | None = None
    """Identify documents by this metadata key (:data:`DOCUMENT_ID`: by ``Document.id``)."""
    with_scores: bool = False
    """Return ``(Document, score)`` pairs instead of Documents."""

    scorer: ClassVar[Callable[..., Fused]]
    scorer_fields: ClassVar[tuple[str, ...]] = ("id_key",)
    sorts_by_score: ClassVar[bool] = True
    call_settings: ClassVar[tuple[str, ...]] = ("top_n", "weights")
    """Fields that ``invoke(..., **settings)`` and ``.bind(**settings)`` may set per call."""
    field_hints: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown(cls, values: Any) -> Any:
        return refuse_unknown_fields(cls, values, cls.field_hints)

    def with_settings(self, **settings: Any) -> BaseFusion:
        """This fusion with per-call ``settings`` validated like fields (itself when they change
        nothing); TypeError names any keyword not in :attr:`call_settings`."""
        if unknown := settings.keys() - set(self.call_settings):
            raise TypeError(
                f"{type(self).__name__} got unexpected keyword argument(s) "
                f"{', '.join(map(repr, sorted(unknown)))}; settings it takes per call: "
                f"{', '.join(self.call_settings)}"
            )
        if all(getattr(self, name) == value for name, value in settings.items()):
            return self
        return type(self)(**{**dict(self), **settings})

    def fuse(self, ranked_lists: FusionInput) -> FusionOutput:
        """Fuse without callbacks: the pure path the Runnable methods wrap."""
        scores, documents = self.scorer(
            *inputs.flatten(ranked_lists, self.weights),
            **{name: getattr(self, name) for name in self.scorer_fields},
        )
        order: Sequence[int] = range(len(scores))
        if self.sorts_by_score:  # stable: ties stay in first-seen order
            order = sorted(order, key=scores.__getitem__, reverse=True)
        fused = algorithms.scored_copies(documents, scores, order[: self.top_n])
        return [(d, d.metadata[FUSION_SCORE_KEY]) for d in fused] if self.with_scores else fused

    def invoke(
        self, input: FusionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> FusionOutput:
        """Fuse, reported as one run to the callbacks (async: in an executor, by default)."""
        used = self.with_settings(**kwargs) if kwargs else self
        return traced_call(used, lambda lists, _: used.fuse(lists), input, config, children=False)


def refuse_unknown_fields(model: type[BaseModel], values: Any, hints: dict[str, str]) -> Any:
    """A before-validator: TypeError for a keyword that is no field of ``model``, with a hint."""
    if isinstance(values, dict) and (unknown := sorted(values.keys() - model.model_fields.keys())):
        close = difflib.get_close_matches(unknown[0], list(model.model_fields), n=1)
        hint = hints.get(unknown[0]) or (f"did you mean {close[0]!r}?" if close else "")
        raise TypeError(
            f"{model.__name__} got an unknown field {unknown[0]!r}{hint and ': ' + hint} "
            f"(fields: {', '.join(sorted(model.model_fields))})"
        )
    return values


def traced_call(
    runnable: Runnable[Any, Any],
    body: Callable[[Any, RunnableConfig], Any],
    input: Any,
    config: RunnableConfig | None,
    *,
    children: bool = True,
) -> Any:
    """``body(input, child_config)`` as one run of ``runnable``, its children nested under it:
    ``Runnable._call_with_config`` without its signature inspection on every call, and without
    the run when no handler (config, context, tracing env) would see it; ``children=False`` (a
    body that starts no runs) skips the child config."""
    config = ensure_config(config)
    run_id, name = config.pop("run_id", None), config.pop("run_name", None)  # never the body's
    callbacks = get_callback_manager_for_config(config)
    if not callbacks.handlers:
        return body(input, config)
    run = callbacks.on_chain_start(None, input, name=name or runnable.get_name(), run_id=run_id)
    try:
        if children:
            child = patch_config(config, callbacks=run.get_child())
            with set_config_context(child) as context:  # bound runnables merge this config
                output = context.run(body, input, child)
        else:
            output = body(input, config)
    except BaseException as error:
        run.on_chain_error(error)
        raise
    run.on_chain_end(output)
    return output


class ReciprocalRankFusion(BaseFusion):
    """Reciprocal rank fusion: score(d) = Σ_i w_i / (rank_constant + rank_i(d)), ranks from
    ``rank_start`` (1 as in Cormack et al. 2009; 0 as in the tutorials whose ranks count from 0)."""

    rank_constant: float = Field(default=algorithms.RRF_K, ge=0, allow_inf_nan=False, strict=True)
    rank_start: Literal[0, 1] = 1

    scorer = staticmethod(algorithms.reciprocal_rank_scores)
    scorer_fields = ("rank_constant", "rank_start", "id_key")
    call_settings: ClassVar[tuple[str, ...]] = ("top_n", "weights", "rank_constant")
    field_hints: ClassVar[dict[str, str]] = {
        "k": "the RRF constant is rank_constant (k is the number of documents a retriever returns)"
    }

    @model_validator(mode="after")
    def _check_rank_constant(self) -> ReciprocalRankFusion:
        if self.rank_constant + self.rank_start <= 0:
            raise ValueError(
                "rank_constant must be positive when rank_start=0 (1 / (0 + 0) is undefined)"
            )
        return self


class RelativeScoreFusion(BaseFusion):
    """Relative score fusion: per-list min-max of ``metadata[score_key]``, weighted, averaged; a
    list without scores falls back to rank-derived scores, with a warning."""

    score_key: str = SCORE_KEY
    scorer = staticmethod(algorithms.relative_scores)
    scorer_fields = ("score_key", "id_key")


class DistBasedScoreFusion(RelativeScoreFusion):
    """Distribution-based score fusion: min-max with bounds mean ± 3σ of each list's scores."""

    scorer = staticmethod(algorithms.distribution_based_scores)


class UniqueUnion(BaseFusion):
    """The multi-query union: every distinct document once, in first-seen order (a union is not a
    ranking); ``fusion_score`` is the summed weight of the lists that returned it."""

    scorer = staticmethod(algorithms.union_scores)
    sorts_by_score: ClassVar[bool] = False


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
