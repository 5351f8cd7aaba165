"""FusionRetriever: query generation, fan-out and fusion as one LangChain ``BaseRetriever``."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableConfig,
    RunnableParallel,
    RunnablePassthrough,
    ensure_config,
)
from langchain_core.runnables.config import patch_config
from langchain_core.runnables.utils import ConfigurableFieldSpec, get_unique_config_specs
from pydantic import Field, field_validator, model_validator

from rag_fusion_chain import queries
from rag_fusion_chain.fusion import BaseFusion, ReciprocalRankFusion
from rag_fusion_chain.fusion.runnables import refuse_unknown_fields
from rag_fusion_chain.retrievers.fanout import DEFAULT_K, MultiRetriever
from rag_fusion_chain.validation import QuestionInput, question_of, validate_count

_HINTS = {
    "llm": "use FusionRetriever.from_llm(retrievers, llm) or query_generator=queries.rag_fusion(llm)",
    "top_n": "k is the number of fused documents a FusionRetriever returns",
}
_FUSED_FLAT = ("rag-fusion", "multi-query", "hyde", "rewrite")  # query steps fused as one list


def _question_first(both: dict[str, Any]) -> list[str]:
    generated = [both["queries"]] if isinstance(both["queries"], str) else both["queries"]
    return list(dict.fromkeys([both["question"], *generated]))


class FusionRetriever(BaseRetriever):
    """Query generation, fan-out and fusion as one ``BaseRetriever``: use it where a retriever goes.

    ``k`` is the number of fused documents returned, as for any LangChain retriever: per call
    ``invoke(question, k=3)`` wins over ``config={"configurable": {"k": 3}}``, which wins over the
    field. Without a ``query_generator`` only the question is searched: a hybrid retriever.
    Documents per underlying call are set on the fan-out (``MultiRetriever(..., k=20)``)."""

    retrievers: MultiRetriever
    """The retrievers to fan out over: one, a list, or a configured MultiRetriever."""
    query_generator: Runnable[Any, Any] | None = None
    """Question to ``list[str]`` (or one ``str``), e.g. ``queries.rag_fusion(llm)``."""
    fusion: BaseFusion = Field(default_factory=ReciprocalRankFusion)
    k: int = Field(default=DEFAULT_K, gt=0, strict=True)  # True and "5" refused, not made 1 and 5

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown(cls, values: Any) -> Any:
        return refuse_unknown_fields(cls, values, _HINTS)

    @field_validator("retrievers", mode="before")
    @classmethod
    def _as_fan_out(cls, value: Any) -> MultiRetriever:
        return value if isinstance(value, MultiRetriever) else MultiRetriever(value)

    @model_validator(mode="after")
    def _check(self) -> FusionRetriever:
        if self.fusion.with_scores:  # the score is in metadata["fusion_score"] anyway
            raise ValueError("fusion must return Documents: use with_scores=False")
        self.retrievers, self.fusion = self.retrievers.weighted_for(self.fusion)
        return self

    @classmethod
    def from_llm(
        cls,
        retrievers: Any,
        llm: Runnable[Any, Any],
        *,
        strategy: str = "rag-fusion",
        include_original: bool = True,
        n: int | None = None,
        **fields: Any,
    ) -> FusionRetriever:
        """A FusionRetriever whose queries come from ``llm`` with the query step of ``strategy``
        (``queries.rag_fusion``...), as ``MultiQueryRetriever.from_llm`` does; the question is
        searched too unless ``include_original=False``. ``n``: queries, where the step counts them."""
        if strategy not in _FUSED_FLAT:
            raise ValueError(f"strategy must be one of {', '.join(_FUSED_FLAT)}; got {strategy!r}")
        factory = getattr(queries, strategy.replace("-", "_"))
        generator = factory(llm) if n is None else factory(llm, n=n)  # hyde(): no n, a TypeError
        if include_original:  # the model's step inside generate_queries, named as in a chain
            generator.name = "queries"
            both = RunnableParallel(question=RunnablePassthrough(), queries=generator)
            generator = (both | _question_first).with_config(run_name="generate_queries")
        return cls(retrievers=retrievers, query_generator=generator, **fields)

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        """``k``, plus what its query generator and retrievers make configurable."""
        own = queries.count_setting("k", "Fused documents returned")._replace(default=self.k)
        generated = self.query_generator.config_specs if self.query_generator else []
        return get_unique_config_specs([own, *generated, *self.retrievers.config_specs])

    def invoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        question = question_of(input)  # as a chain takes; the run gets its config as run_config
        return super().invoke(question, config, run_config=ensure_config(config), **kwargs)

    async def ainvoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        question, run_config = question_of(input), ensure_config(config)
        return await super().ainvoke(question, config, run_config=run_config, **kwargs)

    def _fusion(self, k: int | None, config: RunnableConfig) -> BaseFusion:
        k = queries.configured_count(config, "k", self.k) if k is None else k
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
        queries = self.query_generator.invoke(query, config) if self.query_generator else [query]
        ranked_lists = self.retrievers.invoke(queries, config)
        return self._fusion(k, config).invoke(ranked_lists, config)  # type: ignore[return-value]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        run_config: RunnableConfig | None = None,
    ) -> list[Document]:
        config = patch_config(run_config, callbacks=run_manager.get_child())
        generator = self.query_generator
        queries = await generator.ainvoke(query, config) if generator else [query]
        ranked_lists = await self.retrievers.ainvoke(queries, config)
        return await self._fusion(k, config).ainvoke(ranked_lists, config)  # type: ignore[return-value]
