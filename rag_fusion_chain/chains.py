"""Ready-made chains: multi-query, RAG-Fusion, decomposition, step-back and HyDE.

Each chain is composed from the kit's parts, one traced step each: ``generate_queries``
(:mod:`queries`), ``retrieve`` (:class:`~rag_fusion_chain.retrievers.MultiRetriever`), ``fuse``
(:mod:`fusion`), ``format_context`` and ``answer`` (prompt | llm | StrOutputParser). It maps
``{"question": str}`` (or a plain ``str``) to the answer ``str``, streamed token by token; with
``return_sources=True`` to ``{"answer", "queries", "documents", "failures"}``, streamed as dict
chunks that add up to that dict.

Retrieval overlaps generation: the generated queries are streamed into ``retrieve``, each searched
as soon as the model has written its line, whether the chain is invoked or streamed. The question
itself is searched too, first, before the model has answered: ``include_original=True`` is the
default of :func:`rag_fusion_chain` and :func:`multi_query_chain` (pass ``False`` to search only
the generated queries); step-back searches the question beside its broader question and
recursive decomposition answers it last; HyDE searches its hypothetical passage instead.

The steps are direct children of the chain's run, whose name and tag are the strategy (built by
:func:`pipeline.build_pipeline`, the same with and without a model).

The chain's run name and tag are its strategy, its metadata holds ``n``, ``k`` and ``top_n``, and
``n``, ``k`` and ``top_n`` can be changed per call:
``chain.invoke(question, config={"configurable": {"n": 2, "top_n": 3}})``.

Every chain takes ``k``, the number of documents per retriever call: it is passed as the ``k``
keyword to ``BaseRetriever`` s (``VectorStoreRetriever`` and the kit's retrievers honour it; a
retriever whose ``_get_relevant_documents`` takes no extra keyword ignores it) and every ranked
list is cut to ``k``; None keeps each retriever's default. ``top_n`` is the number of fused
documents quoted to the model (default: the fusion's own ``top_n``, else 5; multi-query keeps the
whole union). ``retrievers`` is one retriever, a list, or a configured ``MultiRetriever``
(weights, timeout, on_error).

``llm`` is a chat model or any Runnable from a prompt to a message or text. With ``llm=None`` the
same pipeline runs with the strategy's offline steps (:mod:`strategies`): queries from
pseudo-relevance feedback on ``feedback``, the BM25 index (default: the ``BM25Retriever`` among
the retrievers; the ``bm25`` extra), and
an extractive answer that shows the strategy (sub-questions, the broader question, the
hypothetical passage); no model at all.

>>> # chain = rag_fusion_chain([bm25, vectors], ChatOpenAI(), n=4, top_n=5)
>>> # for token in chain.stream("How do heat pumps work in winter?"):
>>> #     print(token, end="")
"""

import asyncio
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any, Literal

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import (
    Runnable,
    RunnableConfig,
    RunnableLambda,
    RunnablePassthrough,
)
from langchain_core.runnables.config import get_executor_for_config

from rag_fusion_chain import prompts, strategies
from rag_fusion_chain.context import (
    NO_EARLIER_ANSWERS,
    NO_PASSAGES,
    escape_passage_tags,
    format_context,
)
from rag_fusion_chain.fusion import BaseFusion
from rag_fusion_chain.pipeline import Retrievers, build_pipeline, named, settings_of
from rag_fusion_chain.retrievers.bm25 import BM25Retriever
from rag_fusion_chain.retrievers.results import RetrievalResults
from rag_fusion_chain.strategies import (
    DECOMPOSITION,
    DEFAULT_TOP_N,
    HYDE,
    MULTI_QUERY,
    RAG_FUSION,
    STEP_BACK,
)
from rag_fusion_chain.validation import QuestionInput, question_of

DecompositionMode = Literal["recursive", "individual"]

_ANSWER_VARIABLES = frozenset({"question", "context"})


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------


def _check_llm(llm: Any) -> Runnable[Any, Any] | None:
    if llm is not None and not isinstance(llm, Runnable):
        raise TypeError(f"llm must be a chat model or a Runnable, got {type(llm).__name__}")
    return llm


def _check_prompt(
    name: str,
    prompt: BasePromptTemplate | None,
    default: BasePromptTemplate,
    available: AbstractSet[str],
) -> BasePromptTemplate:
    """The prompt to use; an override may only ask for the variables this chain provides."""
    chosen = default if prompt is None else prompt
    if not isinstance(chosen, BasePromptTemplate):
        raise TypeError(f"{name} must be a prompt template, got {type(chosen).__name__}")
    unknown = set(chosen.input_variables) - available
    if unknown:
        raise ValueError(
            f"{name} asks for {sorted(unknown)}; this chain provides {sorted(available)}"
        )
    return chosen


def _refuse_prompts_offline(overrides: Mapping[str, BasePromptTemplate | None]) -> None:
    for name, value in overrides.items():
        if value is not None:
            raise ValueError(f"{name} needs an llm: the offline chain (llm=None) uses no prompt")


def answer_step(prompt: BasePromptTemplate, llm: Runnable[Any, Any]) -> Runnable[Any, str]:
    """``prompt | llm | StrOutputParser()`` with run name ``answer``; streams tokens.

    >>> from langchain_core.language_models import FakeListChatModel
    >>> step = answer_step(prompts.ANSWER_PROMPT, FakeListChatModel(responses=["42"]))
    >>> step.invoke({"context": "", "question": "?"})
    '42'
    """
    return (prompt | llm | StrOutputParser()).with_config(run_name="answer")


def _chain(
    strategy: str,
    retrievers: Retrievers,
    llm: Runnable[Any, Any] | None,
    *,
    answer_prompt: BasePromptTemplate | None,
    answer_variables: AbstractSet[str],
    return_sources: bool,
    feedback: BM25Retriever | None = None,
    query_prompt: BasePromptTemplate | None = None,
    query_variables: AbstractSet[str] = frozenset({"question"}),
    **options: Any,
) -> Runnable[QuestionInput, Any]:
    """A strategy's pipeline with its answer (the model's, or the offline one), named."""
    record = strategies.get(strategy)
    llm = _check_llm(llm)
    if llm is None:
        _refuse_prompts_offline({"query_prompt": query_prompt, "prompt": answer_prompt})
        answer = record.offline_answer()
    else:
        query_prompt = _check_prompt(
            "query_prompt", query_prompt, record.query_prompt, query_variables
        )
        chosen = _check_prompt("prompt", answer_prompt, record.answer_prompt, answer_variables)
        answer = answer_step(chosen, llm)
    pipeline = build_pipeline(
        record, retrievers, llm, feedback=feedback, query_prompt=query_prompt, **options
    )
    if record.shape == "passages":
        lead = bool(options.get("include_original", False))
        composed = compose(pipeline, answer, return_sources=return_sources, lead_with_question=lead)
        return named_composition(record.name, composed, pipeline, offline=llm is None)
    ready = pipeline.model_copy(update={"answer": answer, "return_sources": return_sources})
    return named(ready, offline=llm is None)


# The LCEL composition of a flat strategy (one fused list of passages)
# --------------------------------------------------------------------------------------------


def _step(name: str, key: str, source: str, runnable: Runnable[Any, Any]) -> Runnable[Any, Any]:
    """A named step adding ``key`` = ``runnable(state[source])`` to the state, one run deep."""

    def run(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {**state, key: runnable.invoke(state[source], config)}

    async def arun(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {**state, key: await runnable.ainvoke(state[source], config)}

    return RunnableLambda(run, arun, name=name)


def _merged(first: Any, rest: Any) -> RetrievalResults:
    """The question's results, then the other queries', as one fan-out output."""
    return RetrievalResults(
        [*first, *rest],
        failures=[*first.failures, *rest.failures],
        queries=[*first.queries, *rest.queries],
    )


def _generate_step(
    generate: Runnable[Any, list[str]], fan_out: Runnable[Any, Any], lead_with_question: bool
) -> Runnable[Any, Any]:
    """``generate_queries``: the query step; with ``lead_with_question`` the question is searched
    beside it, on the config's executor (so ``max_concurrency`` bounds it)."""

    def run(value: QuestionInput, config: RunnableConfig) -> dict[str, Any]:
        question = question_of(value)
        if not lead_with_question:
            return {"question": question, "queries": generate.invoke(question, config)}
        with get_executor_for_config(config) as executor:
            searched = executor.submit(fan_out.invoke, [question], config)
            queries = generate.invoke(question, config)
            return {"question": question, "queries": queries, "first": searched.result()}

    async def arun(value: QuestionInput, config: RunnableConfig) -> dict[str, Any]:
        question = question_of(value)
        if not lead_with_question:
            return {"question": question, "queries": await generate.ainvoke(question, config)}
        searched, queries = await asyncio.gather(
            fan_out.ainvoke([question], config), generate.ainvoke(question, config)
        )
        return {"question": question, "queries": queries, "first": searched}

    return RunnableLambda(run, arun, name="generate_queries")


def _retrieve_step(fan_out: Runnable[Any, Any]) -> Runnable[Any, Any]:
    """``retrieve``: search the generated queries, reusing the question's results when it was
    searched beside the query step and leads them."""

    def rest(state: dict[str, Any]) -> list[str] | None:
        queries = state["queries"]
        return queries[1:] if "first" in state and queries[:1] == [state["question"]] else None

    def done(state: dict[str, Any], retrieved: Any) -> dict[str, Any]:
        failures = list(retrieved.failures)
        return {**state, "retrieved": retrieved, "failures": failures}

    def run(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        others = rest(state)
        if others is None:
            return done(state, fan_out.invoke(state["queries"], config))
        found = fan_out.invoke(others, config) if others else RetrievalResults()
        return done(state, _merged(state["first"], found))

    async def arun(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        others = rest(state)
        if others is None:
            return done(state, await fan_out.ainvoke(state["queries"], config))
        found = await fan_out.ainvoke(others, config) if others else RetrievalResults()
        return done(state, _merged(state["first"], found))

    return RunnableLambda(run, arun, name="retrieve")


def _format_step(state: dict[str, Any]) -> dict[str, Any]:
    return {**state, "context": format_context(state["documents"])}


def compose(
    pipeline: Any,
    answer: Runnable[Any, str],
    *,
    return_sources: bool,
    lead_with_question: bool = False,
) -> Runnable[QuestionInput, Any]:
    """A flat strategy as an LCEL sequence of named steps: ``generate_queries`` → ``retrieve`` →
    ``fuse`` → ``format_context`` → ``answer``; take it apart with ``.steps`` to insert one.

    With ``lead_with_question`` the question is searched in parallel with the query step."""
    fan_out = pipeline.retrieve.with_config(run_name="fan_out")
    generate = pipeline.generate.with_config(run_name="queries")
    steps = (
        _generate_step(generate, fan_out, lead_with_question)
        | _retrieve_step(fan_out)
        | _step("fuse", "documents", "retrieved", pipeline.fuse.with_config(run_name="fusion"))
        | RunnableLambda(_format_step, name="format_context")
    )
    if not return_sources:
        return (steps | answer.with_config(run_name="answer")).with_types(
            input_type=QuestionInput,  # type: ignore[arg-type]  # a union, as langchain accepts
            output_type=str,
        )
    assign = RunnablePassthrough.assign(answer=answer.with_config(run_name="answer_text"))
    with_answer = assign.with_config(run_name="answer")
    sources = steps | with_answer.pick(["answer", "queries", "documents", "failures"])
    return sources.with_types(
        input_type=QuestionInput,  # type: ignore[arg-type]
        output_type=dict[str, Any],
    )


def named_composition(
    strategy: str, composed: Runnable[QuestionInput, Any], pipeline: Any, *, offline: bool
) -> Runnable[QuestionInput, Any]:
    """``composed`` run under the strategy's name and tag, with its settings in metadata."""
    tags = [strategy, "offline"] if offline else [strategy]
    details = {"strategy": strategy, **settings_of(pipeline)}
    if offline:
        details["offline"] = True
    return composed.with_config(run_name=strategy, tags=tags, metadata=details)


# --------------------------------------------------------------------------------------------
# The chains
# --------------------------------------------------------------------------------------------


def multi_query_chain(
    retrievers: Retrievers,
    llm: Runnable[Any, Any] | None = None,
    *,
    n: int = 5,
    k: int | None = None,
    top_n: int | None = None,
    fusion: BaseFusion | None = None,
    include_original: bool = True,
    query_prompt: BasePromptTemplate | None = None,
    prompt: BasePromptTemplate | None = None,
    return_sources: bool = False,
    feedback: BM25Retriever | None = None,
) -> Runnable[QuestionInput, Any]:
    """Multi-query RAG: rephrase the question ``n`` ways, retrieve for each (and for the question
    itself unless ``include_original=False``), take the unique union.

    The union keeps first-seen order, query by query, so by default the whole union is quoted
    to the model (as LangChain's MultiQueryRetriever does): cutting it with ``top_n`` keeps the
    first queries' documents. ``query_prompt`` overrides the rephrasing prompt ({question}, {n}),
    ``prompt`` the answer prompt ({question}, {context}); ``fusion`` replaces the unique union.
    See the module for ``return_sources`` and per-call configuration.

    >>> # multi_query_chain(retriever, llm, n=3).invoke("What is RAG?")
    """
    return _chain(
        MULTI_QUERY,
        retrievers,
        llm,
        answer_prompt=prompt,
        answer_variables=_ANSWER_VARIABLES,
        return_sources=return_sources,
        feedback=feedback,
        query_prompt=query_prompt,
        query_variables={"question", "n"},
        n=n,
        k=k,
        top_n=top_n,
        fusion=fusion,
        include_original=include_original,
    )


def rag_fusion_chain(
    retrievers: Retrievers,
    llm: Runnable[Any, Any] | None = None,
    *,
    n: int = 4,
    k: int | None = None,
    top_n: int | None = None,
    fusion: BaseFusion | None = None,
    include_original: bool = True,
    query_prompt: BasePromptTemplate | None = None,
    prompt: BasePromptTemplate | None = None,
    return_sources: bool = False,
    feedback: BM25Retriever | None = None,
) -> Runnable[QuestionInput, Any]:
    """RAG-Fusion: generate ``n`` related queries, retrieve for each and for the question itself
    (unless ``include_original=False``), fuse by reciprocal rank.

    ``top_n`` (default 5) fused documents are quoted to the model. ``query_prompt`` overrides the
    query prompt ({question}, {n}), ``prompt`` the answer prompt ({question}, {context});
    ``fusion`` replaces reciprocal rank fusion.

    >>> # rag_fusion_chain([bm25, vectors], llm, n=4).invoke({"question": "What is RAG?"})
    """
    return _chain(
        RAG_FUSION,
        retrievers,
        llm,
        answer_prompt=prompt,
        answer_variables=_ANSWER_VARIABLES,
        return_sources=return_sources,
        feedback=feedback,
        query_prompt=query_prompt,
        query_variables={"question", "n"},
        n=n,
        k=k,
        top_n=top_n,
        fusion=fusion,
        include_original=include_original,
    )


def decomposition_chain(
    retrievers: Retrievers,
    llm: Runnable[Any, Any] | None = None,
    *,
    mode: DecompositionMode = "recursive",
    n: int = 3,
    k: int | None = None,
    top_n: int | None = None,
    fusion: BaseFusion | None = None,
    query_prompt: BasePromptTemplate | None = None,
    prompt: BasePromptTemplate | None = None,
    synthesis_prompt: BasePromptTemplate | None = None,
    return_sources: bool = False,
    feedback: BM25Retriever | None = None,
) -> Runnable[QuestionInput, Any]:
    """Decomposition: split the question into at most ``n`` sub-questions and answer them.

    Every sub-question is searched as soon as it is written, and its passages fused apart.
    ``mode="recursive"`` answers the sub-questions in order, each from its own passages and the
    earlier question/answer pairs (``prompt``, default ``RECURSIVE_ANSWER_PROMPT``: {question},
    {context}, {previous_answers}); the question itself is searched and answered last the same
    way, and that answer is streamed. ``mode="individual"`` answers each sub-question on its own,
    concurrently (``prompt``, default ``ANSWER_PROMPT``), then streams a synthesis of the pairs
    (``synthesis_prompt``, default ``SYNTHESIS_PROMPT``: {question}, {context}). Without a model
    the sub-questions are the question's clauses (or the aspects its top BM25 hits show), each
    quoted in turn (the mode does not apply).

    With ``return_sources=True``, ``queries`` are the sub-questions and ``documents`` every
    document quoted, without repeats.

    >>> # decomposition_chain(retriever, llm, mode="individual").invoke("Compare A and B")
    """
    if mode not in ("recursive", "individual"):
        raise ValueError(f"mode must be 'recursive' or 'individual', got {mode!r}")
    record = strategies.get(DECOMPOSITION)
    llm = _check_llm(llm)
    recursive = mode == "recursive" or llm is None
    if llm is None:
        _refuse_prompts_offline(
            {"query_prompt": query_prompt, "prompt": prompt, "synthesis_prompt": synthesis_prompt}
        )
        sub_answer: Runnable[Any, str] = strategies.get(RAG_FUSION).offline_answer()
        answer = record.offline_answer()
    else:
        query_prompt = _check_prompt(
            "query_prompt", query_prompt, record.query_prompt, {"question", "n"}
        )
        in_turn_variables = _ANSWER_VARIABLES | {"previous_answers"}
        if recursive:
            chosen = _check_prompt("prompt", prompt, record.answer_prompt, in_turn_variables)
            sub_answer = answer = answer_step(chosen, llm)
        else:
            chosen = _check_prompt("prompt", prompt, prompts.ANSWER_PROMPT, _ANSWER_VARIABLES)
            synthesis = _check_prompt(
                "synthesis_prompt", synthesis_prompt, prompts.SYNTHESIS_PROMPT, _ANSWER_VARIABLES
            )
            sub_answer, answer = answer_step(chosen, llm), answer_step(synthesis, llm)
    pipeline = build_pipeline(
        record,
        retrievers,
        llm,
        feedback=feedback,
        n=n,
        k=k,
        top_n=top_n,
        fusion=fusion,
        query_prompt=query_prompt,
        question_last=recursive,
    )
    ready = pipeline.model_copy(
        update={
            "sub_answer": sub_answer.with_config(run_name="sub_question"),
            "in_turn": recursive,
            "answer": answer,
            "return_sources": return_sources,
        }
    )
    return named(ready, offline=llm is None, mode="recursive" if recursive else mode)


def step_back_chain(
    retrievers: Retrievers,
    llm: Runnable[Any, Any] | None = None,
    *,
    k: int | None = None,
    top_n: int | None = None,
    fusion: BaseFusion | None = None,
    query_prompt: BasePromptTemplate | None = None,
    prompt: BasePromptTemplate | None = None,
    return_sources: bool = False,
    feedback: BM25Retriever | None = None,
) -> Runnable[QuestionInput, Any]:
    """Step-back prompting: retrieve for the question and for its more general step-back question.

    The question is searched at once, the step-back question as soon as it is written. Each side
    is fused on its own (``top_n`` each); the answer prompt (``prompt``, default
    ``STEP_BACK_ANSWER_PROMPT``: {question}, {context}, {step_back_context},
    {step_back_question}) sees both, background passages numbered on from the question's and
    never repeated. ``query_prompt`` overrides the step-back prompt ({question}). ``queries`` in
    the sources are ``[question, step_back_question]``. Without a model the broader question
    keeps the question's most common words and adds its top BM25 hits' leading terms, and the
    answer shows what it retrieved.

    >>> # step_back_chain(retriever, llm).invoke("Could my 2019 laptop run this macro?")
    """
    variables = _ANSWER_VARIABLES | {"step_back_context", "step_back_question"}
    return _chain(
        STEP_BACK,
        retrievers,
        llm,
        answer_prompt=prompt,
        answer_variables=variables,
        return_sources=return_sources,
        feedback=feedback,
        query_prompt=query_prompt,
        k=k,
        top_n=top_n,
        fusion=fusion,
    )


def hyde_chain(
    retrievers: Retrievers,
    llm: Runnable[Any, Any] | None = None,
    *,
    k: int | None = None,
    top_n: int | None = None,
    fusion: BaseFusion | None = None,
    query_prompt: BasePromptTemplate | None = None,
    prompt: BasePromptTemplate | None = None,
    return_sources: bool = False,
    feedback: BM25Retriever | None = None,
) -> Runnable[QuestionInput, Any]:
    """HyDE: write a hypothetical answer passage and retrieve with it instead of the question.

    ``query_prompt`` overrides the passage prompt ({question}), ``prompt`` the answer prompt
    ({question}, {context}). ``queries`` in the sources is ``[passage]``. Without a model the
    passage is made of the top BM25 hits' sentences closest to the question, and the answer
    shows it.

    >>> # hyde_chain(vector_retriever, llm).invoke("Why is the sky blue?")
    """
    return _chain(
        HYDE,
        retrievers,
        llm,
        answer_prompt=prompt,
        answer_variables=_ANSWER_VARIABLES,
        return_sources=return_sources,
        feedback=feedback,
        query_prompt=query_prompt,
        k=k,
        top_n=top_n,
        fusion=fusion,
    )


_FACTORIES: dict[str, Callable[..., Runnable[QuestionInput, Any]]] = {
    RAG_FUSION: rag_fusion_chain,
    MULTI_QUERY: multi_query_chain,
    DECOMPOSITION: decomposition_chain,
    STEP_BACK: step_back_chain,
    HYDE: hyde_chain,
}


def chain_for(
    strategy: str,
    retrievers: Retrievers,
    llm: Runnable[Any, Any] | None = None,
    *,
    feedback: BM25Retriever | None = None,
    n: int | None = None,
    k: int | None = None,
    top_n: int | None = None,
    return_sources: bool = False,
) -> Runnable[QuestionInput, Any]:
    """The ready chain of ``strategy`` (a :data:`strategies.STRATEGIES` name), with ``llm`` or
    offline (``llm=None``); ``None`` options keep the strategy's defaults.

    ``feedback`` is the BM25 index the offline query step draws on (default: the
    :class:`BM25Retriever` among ``retrievers``).

    >>> # chain_for("rag-fusion", [bm25, vectors], models.chat_model(), return_sources=True)
    """
    record = strategies.get(strategy)
    options: dict[str, Any] = {"k": k, "top_n": top_n, "return_sources": return_sources}
    if n is not None and record.counted:
        options["n"] = n
    return _FACTORIES[record.name](retrievers, llm, feedback=feedback, **options)


__all__ = [
    "DECOMPOSITION",
    "DEFAULT_TOP_N",
    "HYDE",
    "MULTI_QUERY",
    "NO_EARLIER_ANSWERS",
    "NO_PASSAGES",
    "RAG_FUSION",
    "STEP_BACK",
    "answer_step",
    "chain_for",
    "decomposition_chain",
    "escape_passage_tags",
    "format_context",
    "hyde_chain",
    "multi_query_chain",
    "rag_fusion_chain",
    "step_back_chain",
]
