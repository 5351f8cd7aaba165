"""One record per query strategy: what it searches with, with a model and without, and how it
fuses and answers.

The chains, the CLI, the served templates and the evaluation all look a strategy up here
(:func:`get`), so a strategy's name, defaults and steps live in one place:

* ``query_step(llm, n, ...)``: the ``generate_queries`` step with a chat model;
* ``offline_query_step(feedback, n, ...)``: the same step without one, from a BM25 index;
* ``default_fusion``, ``default_top_n`` and ``default_n`` (None: a fixed number of queries, so
  ``n`` is no setting of the strategy);
* ``shape``: how the answer uses the fused passages (``passages``, ``step-back`` or
  ``sub-questions``) and ``offline_answer()``, the answer step without a model.

>>> get("rag-fusion").default_top_n, get("multi-query").default_top_n
(5, None)
>>> STRATEGIES
('rag-fusion', 'multi-query', 'decomposition', 'step-back', 'hyde')
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
)
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import patch_config
from pydantic import ConfigDict

from rag_fusion_chain import prompts, queries
from rag_fusion_chain.fusion import BaseFusion, reciprocal_rank_fusion, unique_union
from rag_fusion_chain.offline import ExtractiveAnswer, FeedbackPassage, PseudoRelevanceFeedback
from rag_fusion_chain.offline_steps import (
    BroaderQuestion,
    DecompositionExtractiveAnswer,
    HydeExtractiveAnswer,
    OfflineSubQuestions,
    StepBackExtractiveAnswer,
)
from rag_fusion_chain.queries import dedupe_key
from rag_fusion_chain.retrievers.bm25 import BM25Retriever
from rag_fusion_chain.validation import QuestionInput, question_of

MULTI_QUERY = "multi-query"
RAG_FUSION = "rag-fusion"
DECOMPOSITION = "decomposition"
STEP_BACK = "step-back"
HYDE = "hyde"

DEFAULT_TOP_N = 5
"""Fused documents kept for the answer when neither ``top_n`` nor the fusion sets it."""

Shape = Literal["passages", "step-back", "sub-questions"]
"""How a strategy answers: from one fused list of passages; from the question's passages and
the broader question's; or sub-question by sub-question."""


# --------------------------------------------------------------------------------------------
# Query steps made of one generated text
# --------------------------------------------------------------------------------------------


class TextQueries(queries.QueryStep):
    """The ``generate_queries`` step of a strategy that generates one text (a step-back question,
    a hypothetical passage): ``[question, text]`` with ``lead_with_question`` (``[question]`` when
    the text is the question again), else ``[text]``.

    Streams list chunks, the question first, so the fan-out searches it while ``generator``
    (traced under ``generator_name``) is still writing.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str | None = "generate_queries"
    generator: Runnable[QuestionInput, str]
    lead_with_question: bool = False
    generator_name: str = "generate_text"

    def _child(self, run_manager: Any, config: RunnableConfig) -> RunnableConfig:
        return patch_config(config, callbacks=run_manager.get_child(), run_name=self.generator_name)

    def _after(self, question: str, text: str) -> list[list[str]]:
        if self.lead_with_question and dedupe_key(text) == dedupe_key(question):
            return []
        return [[text]]

    def _stream_queries(
        self,
        inputs: Iterator[QuestionInput],
        run_manager: CallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> Iterator[list[str]]:
        for value in inputs:
            question = question_of(value)
            if self.lead_with_question:
                yield [question]
            text = self.generator.invoke(question, self._child(run_manager, config))
            yield from self._after(question, text)

    async def _astream_queries(
        self,
        inputs: AsyncIterator[QuestionInput],
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> AsyncIterator[list[str]]:
        async for value in inputs:
            question = question_of(value)
            if self.lead_with_question:
                yield [question]
            text = await self.generator.ainvoke(question, self._child(run_manager, config))
            for chunk in self._after(question, text):
                yield chunk


# --------------------------------------------------------------------------------------------
# The records
# --------------------------------------------------------------------------------------------

ModelQueryStep = Callable[..., Runnable[QuestionInput, list[str]]]
OfflineQueryStep = Callable[..., Runnable[QuestionInput, list[str]]]


@dataclass(frozen=True)
class Strategy:
    """A query strategy: its steps with and without a chat model, its fusion and answer."""

    name: str
    description: str
    shape: Shape
    query_prompt: BasePromptTemplate
    """The default prompt of the query step with a model."""
    answer_prompt: BasePromptTemplate
    """The default prompt of the answer with a model."""
    model_queries: ModelQueryStep
    offline_queries: OfflineQueryStep
    offline_answer: Callable[[], Runnable[Any, str]]
    default_fusion: BaseFusion = field(default_factory=lambda: reciprocal_rank_fusion)
    default_top_n: int | None = DEFAULT_TOP_N
    default_n: int | None = None
    """Queries generated by default; None when the strategy generates a fixed number."""

    @property
    def counted(self) -> bool:
        """Whether ``n`` (the number of generated queries) is a setting of this strategy."""
        return self.default_n is not None

    def query_step(
        self,
        llm: Runnable[Any, Any],
        *,
        n: int | None = None,
        include_original: bool = True,
        prompt: BasePromptTemplate | None = None,
    ) -> Runnable[QuestionInput, list[str]]:
        """The ``generate_queries`` step with ``llm`` (``n``: None keeps :attr:`default_n`)."""
        return self.model_queries(
            llm,
            self.default_n if n is None else n,
            include_original,
            prompt or self.query_prompt,
        )

    def offline_query_step(
        self, feedback: BM25Retriever, *, n: int | None = None, include_original: bool = True
    ) -> Runnable[QuestionInput, list[str]]:
        """The ``generate_queries`` step without a model, drawing on the BM25 index ``feedback``."""
        count = self.default_n if n is None else n
        return self.offline_queries(feedback, count, include_original)


def _generated(factory: Callable[..., queries.QueryGenerator]) -> ModelQueryStep:
    def step(
        llm: Runnable[Any, Any], n: int, include_original: bool, prompt: BasePromptTemplate
    ) -> Runnable[QuestionInput, list[str]]:
        return factory(llm, n, include_original=include_original, prompt=prompt)

    return step


def _sub_questions(
    llm: Runnable[Any, Any], n: int, include_original: bool, prompt: BasePromptTemplate
) -> Runnable[QuestionInput, list[str]]:
    """The sub-questions alone: the question itself is answered after them, not among them."""
    return queries.decomposition(llm, n, prompt=prompt)


def _step_back_question(
    llm: Runnable[Any, Any], n: Any, include_original: bool, prompt: BasePromptTemplate
) -> Runnable[QuestionInput, list[str]]:
    generator = queries.step_back(llm, prompt=prompt)
    return TextQueries(generator=generator, lead_with_question=True, generator_name="step_back")


def _hypothetical_passage(
    llm: Runnable[Any, Any], n: Any, include_original: bool, prompt: BasePromptTemplate
) -> Runnable[QuestionInput, list[str]]:
    generator = queries.hyde(llm, prompt=prompt)
    return TextQueries(generator=generator, generator_name="hypothetical_passage")


def _feedback_queries(
    feedback: BM25Retriever, n: int, include_original: bool
) -> Runnable[QuestionInput, list[str]]:
    return PseudoRelevanceFeedback(retriever=feedback, n=n, include_original=include_original)


def _offline_sub_questions(
    feedback: BM25Retriever, n: int, include_original: bool
) -> Runnable[QuestionInput, list[str]]:
    return OfflineSubQuestions(retriever=feedback, n=n)


def _offline_step_back(
    feedback: BM25Retriever, n: Any, include_original: bool
) -> Runnable[QuestionInput, list[str]]:
    generator = BroaderQuestion(retriever=feedback)
    return TextQueries(generator=generator, lead_with_question=True, generator_name="step_back")


def _offline_passage(
    feedback: BM25Retriever, n: Any, include_original: bool
) -> Runnable[QuestionInput, list[str]]:
    generator = FeedbackPassage(retriever=feedback)
    return TextQueries(generator=generator, generator_name="hypothetical_passage")


_RECORDS = (
    Strategy(
        RAG_FUSION,
        "related queries, fused by reciprocal rank",
        "passages",
        prompts.RAG_FUSION_PROMPT,
        prompts.ANSWER_PROMPT,
        _generated(queries.rag_fusion),
        _feedback_queries,
        ExtractiveAnswer,
        default_n=4,
    ),
    Strategy(
        MULTI_QUERY,
        "rephrasings of the question, unique union of the results",
        "passages",
        prompts.MULTI_QUERY_PROMPT,
        prompts.ANSWER_PROMPT,
        _generated(queries.multi_query),
        _feedback_queries,
        ExtractiveAnswer,
        default_fusion=unique_union,
        default_top_n=None,
        default_n=5,
    ),
    Strategy(
        DECOMPOSITION,
        "sub-questions answered in turn, then the question",
        "sub-questions",
        prompts.DECOMPOSITION_PROMPT,
        prompts.RECURSIVE_ANSWER_PROMPT,
        _sub_questions,
        _offline_sub_questions,
        DecompositionExtractiveAnswer,
        default_n=3,
    ),
    Strategy(
        STEP_BACK,
        "the question and a broader step-back question, each fused apart",
        "step-back",
        prompts.STEP_BACK_PROMPT,
        prompts.STEP_BACK_ANSWER_PROMPT,
        _step_back_question,
        _offline_step_back,
        StepBackExtractiveAnswer,
    ),
    Strategy(
        HYDE,
        "a hypothetical answer passage searched instead of the question",
        "passages",
        prompts.HYDE_PROMPT,
        prompts.ANSWER_PROMPT,
        _hypothetical_passage,
        _offline_passage,
        HydeExtractiveAnswer,
    ),
)
REGISTRY: dict[str, Strategy] = {record.name: record for record in _RECORDS}
STRATEGIES = tuple(REGISTRY)
"""The strategy names, as the chains' run names spell them."""


def get(strategy: str | Strategy) -> Strategy:
    """The record of ``strategy`` (a name, or a record, returned as is).

    >>> get("hyde").shape
    'passages'
    """
    if isinstance(strategy, Strategy):
        return strategy
    if strategy not in REGISTRY:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
    return REGISTRY[strategy]


__all__ = [
    "DECOMPOSITION",
    "DEFAULT_TOP_N",
    "HYDE",
    "MULTI_QUERY",
    "RAG_FUSION",
    "REGISTRY",
    "STEP_BACK",
    "STRATEGIES",
    "Shape",
    "Strategy",
    "TextQueries",
    "get",
]
