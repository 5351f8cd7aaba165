"""The one retrieval pipeline of the kit, with a chat model or without one (offline).

:func:`build_pipeline` composes a strategy's steps (from :mod:`strategies`) into a
:class:`StrategyPipeline` whose run has these steps as direct children, in this order:

``generate_queries`` → ``retrieve`` → ``fuse`` → ``format_context`` → [``answer_sub_questions``]
→ ``answer``

The generated queries are streamed into ``retrieve`` (each searched as soon as it is written,
whether the pipeline is invoked or streamed); ``n``, ``k`` and ``top_n`` are configurable fields,
so ``config={"configurable": {"top_n": 1}}`` works per call and ``config_schema()`` (hence
LangServe) shows them, the same with and without a model. Without an ``answer`` step the output
is the retrieval state: ``{"question", "queries", "retrieved", "documents", "failures",
"context", ...}``, ``documents`` being every passage the answer would quote.

>>> # state = retrieval_pipeline("rag-fusion", [bm25, vectors], llm).invoke("What is RRF?")
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
)
from langchain_core.documents import Document
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import (
    ConfigurableField,
    Runnable,
    RunnableConfig,
    RunnableLambda,
    RunnableSerializable,
)
from langchain_core.runnables.config import patch_config
from langchain_core.runnables.configurable import RunnableConfigurableFields
from langchain_core.runnables.utils import (
    AddableDict,
    ConfigurableFieldSpec,
    get_unique_config_specs,
)
from pydantic import ConfigDict

from rag_fusion_chain import strategies
from rag_fusion_chain.context import format_answered, format_context
from rag_fusion_chain.fusion import BaseFusion
from rag_fusion_chain.offline import feedback_retriever
from rag_fusion_chain.retrievers.bm25 import BM25Retriever
from rag_fusion_chain.retrievers.fanout import MultiRetriever, aadd_up, add_up
from rag_fusion_chain.strategies import Shape, Strategy
from rag_fusion_chain.validation import QuestionInput, question_of, validate_count

State = dict[str, Any]
"""What the pipeline knows about one question: question, queries, retrieved, documents, ..."""
Retrievers = Runnable[Any, Any] | Sequence[Runnable[Any, Any]]
"""One retriever, a list of them, or a configured :class:`MultiRetriever`."""

N_FIELD = ConfigurableField(id="n", name="n", description="Number of generated queries")
K_FIELD = ConfigurableField(id="k", name="k", description="Documents per retriever call")
TOP_N_FIELD = ConfigurableField(id="top_n", name="top_n", description="Fused documents kept")
_ANSWER_KEYS = (
    "question",
    "queries",
    "context",
    "documents",
    "step_back_question",
    "step_back_context",
    "step_back_documents",
    "step_back_retrieved",
    "sub_answers",
    "previous_answers",
)
"""The state an answer step sees (not the ranked lists)."""


# --------------------------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------------------------


def checked_fusion(fusion: BaseFusion | None, default: BaseFusion) -> BaseFusion:
    """The fusion to use (``default`` for None); it must return Documents, not scored pairs."""
    chosen = default if fusion is None else fusion
    if not isinstance(chosen, BaseFusion):
        raise TypeError(
            f"fusion must be a fusion runnable such as reciprocal_rank_fusion, "
            f"got {type(chosen).__name__}"
        )
    if chosen.with_scores:
        raise ValueError("fusion must return Documents: use with_scores=False")
    return chosen


def _fusion_keeping(fusion: BaseFusion | None, record: Strategy, top_n: int | None) -> BaseFusion:
    """The fusion, keeping ``top_n`` (else its own top_n, else the strategy's default)."""
    chosen = checked_fusion(fusion, record.default_fusion)
    kept = top_n if top_n is not None else (chosen.top_n or record.default_top_n)
    if kept is not None:
        validate_count("top_n", kept)
    return chosen.model_copy(update={"top_n": kept})


def fan_out(retrievers: Retrievers, k: int | None) -> MultiRetriever:
    """The retrievers as one :class:`MultiRetriever`, searching ``k`` documents unless None."""
    multi = retrievers if isinstance(retrievers, MultiRetriever) else MultiRetriever(retrievers)
    if k is not None:
        multi = multi.model_copy(update={"k": validate_count("k", k)})
    return multi


def _format_step(value: Mapping[str, Any]) -> str:
    return format_context(value["documents"], start=value.get("start", 1))


FORMAT_CONTEXT = RunnableLambda(_format_step, name="format_context")
"""The ``format_context`` step: ``{"documents", "start"}`` to numbered ``<passage>`` blocks."""


def _passage_identity(document: Document) -> str:
    return document.page_content

"""A passage's identity as fusion sees it by default: its text, whatever its ids or metadata."""


def _unique(documents: Iterable[Document]) -> list[Document]:
    seen: set[Any] = set()
    unique = []
    for document in documents:
        key = _passage_identity(document)
        if key not in seen:
            seen.add(key)
            unique.append(document)
    return unique


def _lists_for(retrieved: Sequence[Any], query: str) -> list[Any]:
    return [ranked for ranked in retrieved if ranked.query == query]


def _sources(shape: Shape, state: State) -> list[Document]:
    """Every passage the answer quotes, each once, in the order they are numbered."""
    if shape == "step-back":
        return [*state["documents"], *state["step_back_documents"]]
    if shape == "sub-questions":
        answered = (documents for _, documents in state["sub_documents"])
        return _unique(itertools.chain(*answered, state["documents"]))
    return list(state["documents"])


# --------------------------------------------------------------------------------------------
# The pipeline
# --------------------------------------------------------------------------------------------


class StrategyPipeline(RunnableSerializable[QuestionInput, Any]):
    """A strategy's steps run as direct children of one run (see the module).

    Output: the answer ``str`` (streamed), with ``return_sources`` dict chunks adding up to
    ``{"answer", "queries", "documents", "failures"}``, or without ``answer`` the state.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    shape: Shape
    generate: Runnable[QuestionInput, list[str]]
    retrieve: Runnable[Any, Any]
    fuse: Runnable[Any, Any]
    question_last: bool = False
    """Search the question itself after the generated queries (recursive decomposition)."""
    sub_answer: Runnable[Any, str] | None = None
    """Sub-questions: the step answering one sub-question from its passages."""
    in_turn: bool = True
    """Sub-questions: answer them one after the other (each seeing the earlier answers)."""
    answer: Runnable[Any, str] | None = None
    return_sources: bool = False

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        steps = [self.generate, self.retrieve, self.fuse, self.sub_answer, self.answer]
        return get_unique_config_specs(
            spec for step in steps if step is not None for spec in step.config_specs
        )

    # ---- state, between the steps (pure) -------------------------------------------------------

    def _searched(self, question: str, generated: Iterable[list[str]]) -> Iterator[list[str]]:
        yield from generated
        if self.question_last:
            yield [question]

    async def _asearched(
        self, question: str, generated: AsyncIterator[list[str]]
    ) -> AsyncIterator[list[str]]:
        async for chunk in generated:
            yield chunk
        if self.question_last:
            yield [question]

    def _groups(self, state: State) -> list[tuple[str, str]]:
        """(state key, query) of each list of passages fused apart."""
        question, queries = state["question"], state["queries"]
        if self.shape == "step-back":
            return [("documents", question)] + [("step_back_documents", q) for q in queries[1:]]
        if self.shape == "sub-questions":
            groups = [(f"sub:{index}", query) for index, query in enumerate(queries)]
            return groups + ([("documents", question)] if self.question_last else [])
        return [("documents", "")]

    def _retrieved(self, state: State, generated: list[str], retrieved: Any) -> State:
        step_back = generated[1] if len(generated) > 1 else state["question"]
        extra = {"step_back_question": step_back} if self.shape == "step-back" else {}
        return {
            **state,
            **extra,
            "queries": generated,
            "retrieved": retrieved,
            "failures": list(retrieved.failures),
        }

    def _fusion_input(self, state: State, query: str) -> Any:
        return (
            state["retrieved"]
            if self.shape == "passages"
            else _lists_for(state["retrieved"], query)
        )

    def _fused(self, state: State, fused: list[list[Document]]) -> State:
        keys = [key for key, _ in self._groups(state)]
        result = {**state, "documents": [], "step_back_documents": []}
        sub_documents = []
        for (key, query), documents in zip(self._groups(state), fused, strict=True):
            if key.startswith("sub:"):
                sub_documents.append((query, documents))
            else:
                result[key] = [*result[key], *documents]
        if "step_back_documents" in keys:  # background passages not already quoted
            result["step_back_retrieved"] = result["step_back_documents"]
            seen = {_passage_identity(document) for document in result["documents"]}
            result["step_back_documents"] = _unique(
                d for d in result["step_back_documents"] if _passage_identity(d) not in seen
            )
        return {**result, "sub_documents": sub_documents}

    def _to_format(self, state: State) -> list[tuple[str, dict[str, Any]]]:
        """(state key, format input) of each context to write."""
        contexts = [
            (f"sub:{index}", {"documents": documents})
            for index, (_, documents) in enumerate(state["sub_documents"])
        ]
        if self.shape != "sub-questions" or self.question_last:
            contexts.append(("context", {"documents": state["documents"]}))
        if self.shape == "step-back":
            start = len(state["documents"]) + 1
            contexts.append(
                ("step_back_context", {"documents": state["step_back_documents"], "start": start})
            )
        return contexts

    def _formatted(self, state: State, texts: list[str]) -> State:
        result = dict(state)
        sub_contexts = []
        for (key, _), text in zip(self._to_format(state), texts, strict=True):
            if key.startswith("sub:"):
                sub_contexts.append(text)
            else:
                result[key] = text
        return {**result, "sub_contexts": sub_contexts}

    def _sub_question_inputs(self, state: State) -> list[State]:
        return [
            {"question": query, "documents": documents, "context": context}
            for (query, documents), context in zip(
                state["sub_documents"], state["sub_contexts"], strict=True
            )
        ]

    def _answered(self, state: State, answered: list[State]) -> State:
        pairs = format_answered(answered)
        extra = {"previous_answers": pairs} if self.in_turn else {"context": pairs}
        return {**state, "sub_answers": answered, **extra}

    def _output(self, state: State) -> State:
        return {
            key: value
            for key, value in {**state, "documents": _sources(self.shape, state)}.items()
            if key not in ("sub_contexts",)
        }

    def _sources_chunk(self, state: State) -> AddableDict:
        return AddableDict(
            queries=state["queries"],
            documents=_sources(self.shape, state),
            failures=state["failures"],
        )

    # ---- the answer-in-turn step -------------------------------------------------------------

    def _answer_sub_questions(self, state: State, config: RunnableConfig) -> list[State]:
        assert self.sub_answer is not None
        answered: list[State] = []
        inputs = self._sub_question_inputs(state)
        if not self.in_turn:
            answers = self.sub_answer.batch(inputs, config)
            return [{**item, "answer": text} for item, text in zip(inputs, answers, strict=True)]
        for item in inputs:
            values = {**item, "previous_answers": format_answered(answered)}
            answered.append({**item, "answer": self.sub_answer.invoke(values, config)})
        return answered

    def _sub_answers_step(self) -> Runnable[State, list[State]]:
        return RunnableLambda(self._answer_sub_questions, name="answer_sub_questions")

    # ---- running the steps -------------------------------------------------------------------

    def _run(
        self,
        inputs: Iterator[QuestionInput],
        run_manager: CallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> Iterator[Any]:
        child = patch_config(config, callbacks=run_manager.get_child())
        for value in inputs:
            state: State = {"question": question_of(value)}
            generated: list[str] = []
            streamed = _recorded(self.generate.stream(state["question"], child), generated)
            searched = self._searched(state["question"], streamed)
            state = self._retrieved(
                state, generated, add_up(self.retrieve.transform(searched, child))
            )
            fused = [
                self.fuse.invoke(self._fusion_input(state, query), _tagged(child, query))
                for _, query in self._groups(state)
            ]
            state = self._fused(state, fused)
            texts = [FORMAT_CONTEXT.invoke(item, child) for _, item in self._to_format(state)]
            state = self._formatted(state, texts)
            if self.sub_answer is not None:
                state = self._answered(state, self._sub_answers_step().invoke(state, child))
            if self.answer is None:
                yield self._output(state)
                continue
            if self.return_sources:
                yield self._sources_chunk(state)
            answer_input = {key: state[key] for key in _ANSWER_KEYS if key in state}
            for token in self.answer.stream(answer_input, child):
                yield AddableDict(answer=token) if self.return_sources else token

    async def _arun(
        self,
        inputs: AsyncIterator[QuestionInput],
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> AsyncIterator[Any]:
        child = patch_config(config, callbacks=run_manager.get_child())
        async for value in inputs:
            state: State = {"question": question_of(value)}
            generated: list[str] = []
            asked = _arecorded(self.generate.astream(state["question"], child), generated)
            searched = self._asearched(state["question"], asked)
            retrieved = await aadd_up(self.retrieve.atransform(searched, child))
            state = self._retrieved(state, generated, retrieved)
            fused = [
                await self.fuse.ainvoke(self._fusion_input(state, query), _tagged(child, query))
                for _, query in self._groups(state)
            ]
            state = self._fused(state, fused)
            texts = [
                await FORMAT_CONTEXT.ainvoke(item, child) for _, item in self._to_format(state)
            ]
            state = self._formatted(state, texts)
            if self.sub_answer is not None:
                answered = await self._sub_answers_step().ainvoke(state, child)
                state = self._answered(state, answered)
            if self.answer is None:
                yield self._output(state)
                continue
            if self.return_sources:
                yield self._sources_chunk(state)
            answer_input = {key: state[key] for key in _ANSWER_KEYS if key in state}
            async for token in self.answer.astream(answer_input, child):
                yield AddableDict(answer=token) if self.return_sources else token

    def stream(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        yield from self._transform_stream_with_config(iter([input]), self._run, config)

    async def astream(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        async def one() -> AsyncIterator[QuestionInput]:
            yield input

        async for chunk in self._atransform_stream_with_config(one(), self._arun, config):
            yield chunk

    def invoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        return add_up(self.stream(input, config))

    async def ainvoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        return await aadd_up(self.astream(input, config))


def _recorded(chunks: Iterator[list[str]], into: list[str]) -> Iterator[list[str]]:
    """``chunks`` passed on, each also added to ``into``."""
    for chunk in chunks:
        into.extend(chunk)
        yield chunk


async def _arecorded(chunks: AsyncIterator[list[str]], into: list[str]) -> AsyncIterator[list[str]]:
    """Async :func:`_recorded`."""
    async for chunk in chunks:
        into.extend(chunk)
        yield chunk


def _tagged(config: RunnableConfig, query: str) -> RunnableConfig:
    """``config`` with the query whose lists are fused in the run's metadata (when apart)."""
    if not query:
        return config
    return {**config, "metadata": {**(config.get("metadata") or {}), "query": query}}


# --------------------------------------------------------------------------------------------
# The builder
# --------------------------------------------------------------------------------------------


def build_pipeline(
    strategy: str | Strategy,
    retrievers: Retrievers,
    llm: Runnable[Any, Any] | None = None,
    *,
    feedback: BM25Retriever | None = None,
    n: int | None = None,
    k: int | None = None,
    top_n: int | None = None,
    fusion: BaseFusion | None = None,
    include_original: bool = True,
    query_prompt: BasePromptTemplate | None = None,
    question_last: bool = False,
) -> StrategyPipeline:
    """The steps of ``strategy`` up to the fused, formatted passages: no answer, not named.

    With ``llm`` the queries come from the model (:meth:`Strategy.query_step`); without, from
    the BM25 index ``feedback`` (default: the :class:`BM25Retriever` among ``retrievers``).
    ``n`` / ``top_n`` None keep the strategy's defaults; ``k`` None each retriever's.
    """
    record = strategies.get(strategy)
    if llm is None:
        generator = record.offline_query_step(
            feedback or feedback_retriever(retrievers), n=n, include_original=include_original
        )
    else:
        generator = record.query_step(
            llm, n=n, include_original=include_original, prompt=query_prompt
        )
    generate = (
        RunnableConfigurableFields(default=generator, fields={"n": N_FIELD})
        if record.counted and isinstance(generator, RunnableSerializable)
        else generator
    )
    retrieve = RunnableConfigurableFields(default=fan_out(retrievers, k), fields={"k": K_FIELD})
    fuse = _fusion_keeping(fusion, record, top_n).configurable_fields(top_n=TOP_N_FIELD)
    return StrategyPipeline(
        name=record.name,
        shape=record.shape,
        generate=generate,
        retrieve=retrieve,
        fuse=fuse,
        question_last=question_last,
    )


def settings_of(pipeline: StrategyPipeline) -> dict[str, Any]:
    """The ``n``, ``k`` and ``top_n`` a pipeline was built with (its run metadata)."""
    defaults = {spec.id: spec.default for spec in pipeline.config_specs}
    return {"n": defaults.get("n", 1), "k": defaults.get("k"), "top_n": defaults.get("top_n")}


def named(
    pipeline: StrategyPipeline, *, offline: bool, **metadata: Any
) -> Runnable[QuestionInput, Any]:
    """``pipeline`` run under its strategy's name, tagged with it, with its settings in metadata."""
    strategy = pipeline.name or ""
    tags = [strategy, "offline"] if offline else [strategy]
    details = {"strategy": strategy, **settings_of(pipeline), **metadata}
    if offline:
        details["offline"] = True
    return pipeline.with_config(run_name=strategy, tags=tags, metadata=details)


def retrieval_pipeline(
    strategy: str | Strategy,
    retrievers: Retrievers,
    llm: Runnable[Any, Any] | None = None,
    **options: Any,
) -> Runnable[QuestionInput, State]:
    """Question to the retrieval state of ``strategy``: the ready chain's steps up to the answer.

    Same options as :func:`build_pipeline`. The output holds ``question``, ``queries``,
    ``retrieved`` (the ranked lists, each knowing its query and source), ``documents`` (every
    passage the answer would quote), ``failures`` and ``context``.

    >>> # retrieval_pipeline("multi-query", [bm25], n=2, top_n=4).invoke("What is RRF?")
    """
    return named(build_pipeline(strategy, retrievers, llm, **options), offline=llm is None)


__all__ = [
    "FORMAT_CONTEXT",
    "K_FIELD",
    "N_FIELD",
    "TOP_N_FIELD",
    "Retrievers",
    "State",
    "StrategyPipeline",
    "build_pipeline",
    "checked_fusion",
    "fan_out",
    "named",
    "retrieval_pipeline",
    "settings_of",
]
