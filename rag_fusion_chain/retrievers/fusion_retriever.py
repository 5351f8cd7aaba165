"""FusionRetriever: query generation, fan-out and fusion as one ``BaseRetriever``.

The generated queries are streamed into the fan-out, so each is searched as soon as the model
has written it (see :mod:`rag_fusion_chain.retrievers.multi`).
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.runnables.config import patch_config
from langchain_core.runnables.utils import ConfigurableFieldSpec, get_unique_config_specs
from pydantic import ConfigDict, Field, field_validator

from rag_fusion_chain.fusion import BaseFusion, ReciprocalRankFusion
from rag_fusion_chain.retrievers.multi import MultiRetriever
from rag_fusion_chain.retrievers.streams import aadd_up, add_up, one
from rag_fusion_chain.validation import validate_count

DEFAULT_K = 5
"""Documents a :class:`FusionRetriever` returns unless ``k`` is given at invoke time."""

K_FIELD = "k"
"""The configurable field (``config={"configurable": {"k": 3}}``) for the fused documents kept."""


class FusionRetriever(BaseRetriever):
    """Query generation, fan-out and fusion as one ``BaseRetriever``: use it where a retriever goes.

    ``k`` is the number of fused documents returned. Per call, ``retriever.invoke(question, k=3)``
    (like any LangChain retriever) wins over ``config={"configurable": {"k": 3}}``, which wins over
    the field; ``k`` is listed in ``config_specs`` (so ``config_schema()`` and LangServe show it).
    Documents per underlying retriever call are set on the fan-out (``MultiRetriever(..., k=20)``).
    Without a ``query_generator`` the question itself is the only query, which makes this a
    hybrid retriever over ``retrievers``.

    >>> # retriever = FusionRetriever(
    >>> #     retrievers=[bm25, vectors], query_generator=queries.rag_fusion(llm, n=4), k=5)
    >>> # retriever.invoke("How do heat pumps work?", k=3)  # three fused Documents
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retrievers: MultiRetriever
    """The retrievers to fan out over: a list (or one) of them, or a configured MultiRetriever."""
    query_generator: Runnable[Any, Any] | None = None
    """Question to ``list[str]`` (or to one ``str``), e.g. ``queries.rag_fusion(llm)``."""
    fusion: BaseFusion = Field(default_factory=ReciprocalRankFusion)
    k: int = DEFAULT_K

    @field_validator("retrievers", mode="before")
    @classmethod
    def _as_multi_retriever(cls, value: Any) -> MultiRetriever:
        return value if isinstance(value, MultiRetriever) else MultiRetriever(value)

    @field_validator("fusion")
    @classmethod
    def _check_fusion(cls, fusion: BaseFusion) -> BaseFusion:
        if fusion.with_scores:
            raise ValueError(
                "fusion must return Documents (with_scores=False); the fused score is in "
                "metadata['fusion_score']"
            )
        return fusion

    @field_validator("k")
    @classmethod
    def _check_k(cls, k: int) -> int:
        return validate_count("k", k)

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        """``k``, plus whatever the query generator makes configurable (``n``, say)."""
        own = ConfigurableFieldSpec(
            id=K_FIELD,
            annotation=int,
            name="k",
            description="Fused documents returned",
            default=self.k,
        )
        generated = self.query_generator.config_specs if self.query_generator else []
        return get_unique_config_specs([*super().config_specs, own, *generated])

    def invoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        # BaseRetriever hands its run only a run manager; pass the config on for max_concurrency,
        # configurable fields and tags.
        return super().invoke(input, config, run_config=ensure_config(config), **kwargs)

    async def ainvoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        return await super().ainvoke(input, config, run_config=ensure_config(config), **kwargs)

    def _fusion_keeping(self, k: int | None, config: RunnableConfig) -> BaseFusion:
        if k is None:  # a configurable k of None (LangServe sends unset fields so) keeps the field
            configured = config.get("configurable", {}).get(K_FIELD)
            k = self.k if configured is None else configured
        return self.fusion.with_settings(top_n=validate_count("k", k))

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        run_config: RunnableConfig | None = None,
    ) -> list[Document]:
        config = patch_config(run_config, callbacks=run_manager.get_child())
        fusion = self._fusion_keeping(k, config)
        query_stream = (
            self.query_generator.stream(query, config) if self.query_generator else iter([query])
        )
        ranked_lists = add_up(self.retrievers.transform(query_stream, config))
        return fusion.invoke(ranked_lists, config)  # type: ignore[return-value]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        run_config: RunnableConfig | None = None,
    ) -> list[Document]:
        config = patch_config(run_config, callbacks=run_manager.get_child())
        fusion = self._fusion_keeping(k, config)
        query_stream = (
            self.query_generator.astream(query, config) if self.query_generator else one(query)
        )
        ranked_lists = await aadd_up(self.retrievers.atransform(query_stream, config))
        return await fusion.ainvoke(ranked_lists, config)  # type: ignore[return-value]


__all__ = ["DEFAULT_K", "FusionRetriever"]
