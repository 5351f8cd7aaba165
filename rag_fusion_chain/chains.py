"""Ready-made chains: each strategy of :mod:`strategies` as one LCEL sequence of named steps.

``generate_queries`` → ``retrieve`` → ``fuse`` → ``format_context`` → [``answer_sub_questions``]
(each a :class:`Step` over a state dict) → ``answer`` (streamed), from the kit's public parts: the
strategy's query step (or its offline one), :class:`~rag_fusion_chain.retrievers.MultiRetriever`,
a fusion runnable, :func:`~rag_fusion_chain.context.format_context` and ``prompt | llm |
StrOutputParser()`` (or the offline extractive answer). The question itself is searched beside the
query step where the record says so (offline, first: its documents give the queries). Input: ``str``
or ``{"question": str}``; output: the answer; with ``return_sources=True`` dict chunks adding up to
``{"answer", "queries", "documents", "failures"}``, the sources first.

Per call: ``config={"configurable": {"n": 2, "k": 10, "top_n": 3}}`` (see the README for what each
means); the run is named after the strategy, tagged with it, with the settings in its metadata.

>>> # chain = chain_for("rag-fusion", [bm25, vectors], llm, n=4)
>>> # chain = with_step(chain, reranker, after="fuse")   # a state -> state runnable
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Literal, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import (
    Runnable,
    RunnableBinding,
    RunnableConfig,
    RunnableLambda,
    RunnableSequence,
)
from langchain_core.runnables.utils import AddableDict, ConfigurableFieldSpec
from pydantic import Field, InstanceOf, SkipValidation, StrictBool, validate_call

from rag_fusion_chain import prompts, strategies
from rag_fusion_chain.context import format_answered, format_context, passage_numbers
from rag_fusion_chain.fusion import BaseFusion, reciprocal_rank_fusion
from rag_fusion_chain.queries import N_SPEC, Step, configured_count, count_setting
from rag_fusion_chain.retrievers.fanout import (
    MultiRetriever,
    RetrievalResults,
    in_background,
    warn_about,
)
from rag_fusion_chain.strategies import State, Strategy
from rag_fusion_chain.validation import MAX_QUERIES, Question, question_of

Retrievers = Runnable[Any, Any] | Sequence[Runnable[Any, Any]]  # or a configured MultiRetriever


K_SPEC = count_setting("k", "Documents each retriever returns per query")
TOP_N_SPEC = count_setting("top_n", "Fused documents kept (and quoted to the model)")


def _unique(documents: Sequence[Document], skip: Sequence[Document] = ()) -> list[Document]:
    kept: dict[str, Document | None] = dict.fromkeys(document.page_content for document in skip)
    for document in documents:  # identity by text, as fusion's default; a skipped text: None
        kept.setdefault(document.page_content, document)
    return [document for document in kept.values() if document is not None]


# ---- the steps' state transitions (pure) --------------------------------------------------------


def _fused_apart(record: Strategy, state: State, fuse: Callable[[list[Any]], list[Any]]) -> State:
    """``state`` with its ranked lists fused in groups: the question's and the step-back
    question's apart, or each sub-question's apart (see :attr:`Strategy.grouping`)."""
    retrieved, question, queries = state["retrieved"], state["question"], state["queries"]
    fused = {  # the question unsearched (decomposition, mode="individual"): no lists, none fused
        query: fuse([ranked for ranked in retrieved if ranked.query == query])
        for query in {question, *queries}
    }
    if record.grouping == "step-back":  # the model repeated the question: no broader documents
        broader = _unique(fused[queries[-1]], skip=fused[question])
        step_back = {"step_back_question": queries[-1], "step_back_documents": broader}
        return {**state, "documents": fused[question], **step_back}
    answered = [(query, fused[query]) for query in queries]
    return {**state, "sub_documents": answered, "documents": fused[question]}


def _formatted(state: State, config: RunnableConfig) -> State:  # a flat strategy's
    return {**state, "context": format_context(state["documents"])}


def _formatted_apart(state: State, config: RunnableConfig) -> State:
    """Every context (step-back, sub-questions), each passage numbered by its place in the sources."""
    quote = partial(format_context, numbers=passage_numbers(_in_source_order(state)))
    result = {**state, "context": quote(state["documents"])}
    if "step_back_documents" in state:
        result["step_back_context"] = quote(state["step_back_documents"])
    if "sub_documents" in state:
        result["sub_contexts"] = [  # each sub-question's own input to the sub-answer step
            {"question": query, "context": quote(docs)} for query, docs in state["sub_documents"]
        ]
    return result


def _in_source_order(state: State) -> list[Document]:
    """Every passage quoted, repeats too: sub-questions' first, the question's, the step-back's."""
    answered = [document for _, found in state.get("sub_documents", []) for document in found]
    return [*answered, *state["documents"], *state.get("step_back_documents", [])]


def quoted_documents(state: State) -> list[Document]:
    """Every passage a ready chain's answer quotes, once each, from its retrieval state (the
    output of :func:`retrieval_chain`): sub-questions' first, then the question's, then the
    step-back question's."""
    return _unique(_in_source_order(state))


def _sources(state: State) -> AddableDict:
    documents = quoted_documents(state)
    return AddableDict(queries=state["queries"], documents=documents, failures=state["failures"])


# ---- the steps ------------------------------------------------------------------------------------


def _unsearched(state: State) -> tuple[State, Any, list[str]]:
    """(the state without ``first``, ``first``: the question's search begun by the query step
    or None, the queries still to search: all but a begun question, wherever a step put it)."""
    state, searched = dict(state), state["searched"]
    begun = state.pop("first", None)  # a step inserted after generate_queries may drop it
    if begun is None:
        return state, None, searched
    return state, begun.search, [text for text in searched if text != state["question"]]


class _Begun(dict):  # type: ignore[type-arg]
    """The question's search, begun beside the query step: a deep copy of the state shares it;
    serialised (LangServe's stream_log, a trace) as an empty dict, the search not being data."""

    def __init__(self, search: Any) -> None:
        super().__init__()
        self.search = search  # a Future, a Task, or offline the results

    def __deepcopy__(self, memo: dict[int, Any]) -> _Begun:  # astream_log copies every output
        return self


class _SearchGuard(BaseCallbackHandler):
    """Ends the question's search ``generate_queries`` handed on with the call's run, if no
    ``retrieve`` took it (cancelled or failed between the steps, a step that dropped it)."""

    run_inline = True  # in the event loop's thread, where a Task may be cancelled
    run_id: UUID | None = None  # the call's run: the first to start
    search: Any = None

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.run_id = self.run_id or run_id

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        begun = outputs.get("first") if isinstance(outputs, dict) else None
        self.search = begun.search if isinstance(begun, _Begun) else self.search
        if run_id == self.run_id and isinstance(self.search, Future | asyncio.Future):
            self.search.cancel()  # no effect once done (taken by retrieve)

    on_chain_error = on_chain_end  # type: ignore[assignment]


def _retrieved(state: State, first: RetrievalResults | None, found: RetrievalResults) -> State:
    """``state`` with every list searched; a failing retriever warned about once for them all."""
    retrieved = found if first is None else first + found
    if retrieved.failures:  # the fan-out only records them (on_error="raise" has raised)
        warn_about(retrieved.failures, len(retrieved.queries), stacklevel=3)
    return {**state, "retrieved": retrieved, "failures": retrieved.failures}


def _synthesised(state: State, items: list[State], texts: list[str]) -> State:
    """``state`` with the sub-questions answered all at once: the answer step's synthesis context."""
    answers = [{**item, "answer": text} for item, text in zip(items, texts, strict=True)]
    return {**state, "sub_answers": answers, "context": format_answered(answers)}


def _call_config(settings: list[ConfigurableFieldSpec], config: RunnableConfig) -> RunnableConfig:
    """One call's: the run's metadata with the ``settings`` it sets (None: unset), so that a trace
    shows what ran, and in an event loop a :class:`_SearchGuard` (a sync call hands on no Task)."""
    given = config.get("configurable") or {}
    guards: list[BaseCallbackHandler] = [_SearchGuard()] if asyncio._get_running_loop() else []
    used = {spec.id: given[spec.id] for spec in settings if given.get(spec.id) is not None}
    return {"metadata": used, "callbacks": guards}


@dataclass(frozen=True)
class _Steps:
    """The bodies of one ready chain's steps (sync and async) over its parts: each method is one
    step's; the fan-out's ``k`` and the fusion's ``top_n`` may be set per call."""

    record: Strategy
    query_step: Runnable[Any, list[str]] | None  # None: offline
    fan_out: MultiRetriever
    fusion: BaseFusion
    answer_step: Runnable[State, str]
    sub_answer: Runnable[Any, str] | None  # decomposition: the answer step itself if in turn
    search_question: bool
    count: int
    return_sources: bool

    def __deepcopy__(self, memo: dict[int, Any]) -> _Steps:
        """Itself: the parts are shared, as a closure's were; a chain's deep copy copies no model."""
        return self

    def _queried(self, question: str, generated: list[str]) -> State:
        """The state after the query step: ``queries`` as users see them, ``searched`` in order (a
        step-back question after the question, unless the model repeated it)."""
        searching = self.search_question
        searched = list(dict.fromkeys([question, *generated] if searching else generated))
        shown = generated if self.record.grouping == "sub-questions" else searched
        return {"question": question, "queries": shown, "searched": searched}

    def generate(self, value: Any, config: RunnableConfig) -> State:
        """``generate_queries``: the query step, the question's search begun beside it and handed
        on unfinished as ``first`` (``retrieve`` does not wait for it: never a retrieval round
        slower than ``generator | retriever.map()``), or, not begun yet or under a config's
        ``max_concurrency`` (whose bound it would break), searched with the queries;
        offline, the question is searched first and the queries drawn from its documents."""
        question, k = question_of(value), configured_count(config, "k", None)  # None: as built
        if self.query_step is None:
            return self._offline(question, self.fan_out.invoke(question, config, k), config)
        begin = self.search_question and config.get("max_concurrency") is None  # a bound: not here
        first = in_background(self.fan_out.invoke, question, config, k) if begin else None
        state = self._queried(question, self.query_step.invoke(question, config))
        return {**state, "first": None if first is None or first.cancel() else _Begun(first)}

    async def agenerate(self, value: Any, config: RunnableConfig) -> State:
        question, k = question_of(value), configured_count(config, "k", None)
        fan_out = partial(self.fan_out.ainvoke, config=config, k=k)
        if self.query_step is None:
            return self._offline(question, await fan_out(question), config)
        begin = self.search_question and config.get("max_concurrency") is None
        first = asyncio.ensure_future(fan_out(question)) if begin else None
        try:
            generated = await self.query_step.ainvoke(question, config)
        except BaseException:  # cancelled (a timeout, a client gone): the search ends too
            if first is not None:
                first.cancel()
            raise
        state = self._queried(question, generated)
        return {**state, "first": first and _Begun(first)}

    def _offline(self, question: str, first: RetrievalResults, config: RunnableConfig) -> State:
        # the question's whole fused ranking: the best documents lead, the rest give term statistics
        documents: list[Document] = reciprocal_rank_fusion.fuse(first)  # type: ignore[assignment]
        generated = self.record.offline_queries(
            question, documents, configured_count(config, "n", self.count, MAX_QUERIES)
        )
        state = self._queried(question, generated)
        if question not in state["searched"]:  # searched for its documents only: failures kept
            first = RetrievalResults((), first.failures, first.queries)
        return {**state, "first": _Begun(first)}

    def retrieve(self, state: State, config: RunnableConfig) -> State:
        """``retrieve``: search what the query step did not, all at once (each retriever's batch),
        while the question's search ends (with ``max_concurrency`` set, not begun: searched here)."""
        state, first, queries = _unsearched(state)
        k = configured_count(config, "k", None)
        found = self.fan_out.invoke(queries, config, k) if queries else RetrievalResults()
        return _retrieved(state, first.result() if isinstance(first, Future) else first, found)

    async def aretrieve(self, state: State, config: RunnableConfig) -> State:
        state, first, queries = _unsearched(state)
        k, nothing = configured_count(config, "k", None), RetrievalResults()
        rest = self.fan_out.ainvoke(queries, config, k) if queries else asyncio.sleep(0, nothing)
        begun = first if isinstance(first, asyncio.Future) else asyncio.sleep(0, first)
        return _retrieved(state, *await asyncio.gather(begun, rest))  # both errors read

    def fuse(self, state: State, config: RunnableConfig) -> State:  # CPU only: no async twin
        """``fuse``: the lists all at once (flat) or in groups, by the fusion's pure ``fuse``."""
        top_n = configured_count(config, "top_n", None)  # None: the fusion's own
        fusion = self.fusion if top_n is None else self.fusion.with_settings(top_n=top_n)
        if self.record.grouping == "flat":
            return {**state, "documents": fusion.fuse(list(state["retrieved"]))}
        return _fused_apart(self.record, state, fusion.fuse)

    def sub_answers(self, state: State, config: RunnableConfig) -> State:
        """``answer_sub_questions``: each sub-question answered from its passages, in turn
        (seeing the earlier answers) or all at once (then synthesised by the answer step)."""
        items, sub_answer = state["sub_contexts"], cast(Runnable[Any, str], self.sub_answer)
        if sub_answer is not self.answer_step:  # all at once; else in turn, by the answer step
            return _synthesised(state, items, sub_answer.batch(items, config))
        answers: list[State] = []
        for item in items:
            values = {**item, "previous_answers": format_answered(answers)}
            answers.append({**item, "answer": sub_answer.invoke(values, config)})
        return {**state, "sub_answers": answers, "previous_answers": format_answered(answers)}

    async def asub_answers(self, state: State, config: RunnableConfig) -> State:
        items, sub_answer = state["sub_contexts"], cast(Runnable[Any, str], self.sub_answer)
        if sub_answer is not self.answer_step:
            return _synthesised(state, items, await sub_answer.abatch(items, config))
        answers: list[State] = []
        for item in items:
            values = {**item, "previous_answers": format_answered(answers)}
            answers.append({**item, "answer": await sub_answer.ainvoke(values, config)})
        return {**state, "sub_answers": answers, "previous_answers": format_answered(answers)}

    def answer(self, state: dict, config: RunnableConfig) -> Any:  # dict: LangChain's schema
        """``answer``: the answer's tokens, streamed; with sources, the sources chunk first."""
        if self.return_sources:
            yield _sources(state)
        for token in self.answer_step.stream(state, config):
            yield AddableDict(answer=token) if self.return_sources else token

    async def aanswer(self, state: State, config: RunnableConfig) -> Any:
        if self.return_sources:
            yield _sources(state)
        async for token in self.answer_step.astream(state, config):
            yield AddableDict(answer=token) if self.return_sources else token


def _offline_lines(record: Strategy) -> Runnable[State, str]:
    def lines(state: State) -> Any:
        yield from record.offline_answer(state).splitlines(keepends=True)

    async def alines(state: State) -> Any:
        for line in lines(state):
            yield line

    return RunnableLambda(lines, afunc=alines, name="extractive_answer")


# ---- building ---------------------------------------------------------------------------------


def _checked_prompt(
    name: str, prompt: BasePromptTemplate | None, default: BasePromptTemplate, available: set[str]
) -> BasePromptTemplate:
    """``prompt``, if it asks only for ``available`` variables; None: ``default``, the strategy's
    own, which fits by construction (tests/test_chains.py checks every record's)."""
    if prompt is None:
        return default
    if unknown := set(prompt.input_variables) - available:
        raise ValueError(f"{name} asks for {sorted(unknown)}; the chain gives {sorted(available)}")
    return prompt


def _model_steps(
    record: Strategy,
    llm: Runnable[Any, Any] | None,
    count: int,
    mode: str,
    query_prompt: BasePromptTemplate | None,
    prompt: BasePromptTemplate | None,
    synthesis_prompt: BasePromptTemplate | None,
) -> tuple[Runnable[Any, Any] | None, Runnable[Any, str], Runnable[Any, str] | None]:
    """(the query step, None offline; the answer step's runnable; the sub-question answer or
    None): the steps the model (or offline, the extractive answer) takes part in."""
    if llm is None:
        if (query_prompt, prompt, synthesis_prompt) != (None, None, None):
            raise ValueError(
                "query_prompt, prompt and synthesis_prompt need an llm: the offline chain "
                "(llm=None) uses no prompt"
            )
        return None, _offline_lines(record), None
    chosen = _checked_prompt("query_prompt", query_prompt, record.query_prompt, {"question", "n"})
    query_step = record.model_queries(llm, count, prompt=chosen)
    query_step.name = "queries"  # made for this chain: named, not wrapped in a binding
    provided = {"question", "context", "step_back_context", "step_back_question"}
    if record.grouping != "sub-questions":
        chosen = _checked_prompt("prompt", prompt, record.answer_prompt, provided)
        return query_step, chosen | llm | StrOutputParser(), None
    if mode == "recursive":
        in_turn = {"question", "context", "previous_answers"}
        chosen = _checked_prompt("prompt", prompt, record.answer_prompt, in_turn)
        answer = chosen | llm | StrOutputParser()
        return query_step, answer, answer
    sub = _checked_prompt("prompt", prompt, prompts.ANSWER_PROMPT, {"question", "context"})
    synthesis = _checked_prompt(
        "synthesis_prompt", synthesis_prompt, prompts.SYNTHESIS_PROMPT, {"question", "context"}
    )
    return query_step, synthesis | llm | StrOutputParser(), sub | llm | StrOutputParser()


def _split(chain: Runnable[Any, Any], after: str) -> tuple[list[Any], list[Any], RunnableBinding]:
    """A ready chain's steps up to the one named ``after``, the rest, and the binding around them
    (the chain's name, tags, metadata and :class:`_SearchGuard`)."""
    bound = chain.bound if isinstance(chain, RunnableBinding) else chain
    if not isinstance(bound, RunnableSequence):
        raise TypeError(f"chain must be a ready chain (a sequence of steps); got {chain!r:.40}")
    binding = chain if isinstance(chain, RunnableBinding) else RunnableBinding(bound=chain)
    names = [step.get_name() for step in bound.steps]
    if after not in names:
        raise ValueError(f"after must name a step of the chain, one of {names}; got {after!r}")
    at = names.index(after) + 1
    return bound.steps[:at], bound.steps[at:], binding


@validate_call(config={"arbitrary_types_allowed": True})
def chain_for(
    strategy: SkipValidation[str | Strategy],
    retrievers: SkipValidation[Retrievers],
    llm: SkipValidation[Runnable[Any, Any] | None] = None,  # positional: named in its own error
    *,
    n: Annotated[int, Field(gt=0, le=MAX_QUERIES, strict=True)] | None = None,
    k: Annotated[int, Field(gt=0, strict=True)] | None = None,
    top_n: Annotated[int, Field(gt=0, strict=True)] | None = None,
    fusion: InstanceOf[BaseFusion] | None = None,
    include_original: StrictBool | None = None,
    mode: Literal["recursive", "individual"] | None = None,
    query_prompt: InstanceOf[BasePromptTemplate] | None = None,
    prompt: InstanceOf[BasePromptTemplate] | None = None,
    synthesis_prompt: InstanceOf[BasePromptTemplate] | None = None,
    return_sources: StrictBool = False,
) -> Runnable[Any, Any]:
    """The ready chain of ``strategy`` over ``retrievers``, with ``llm`` or offline (None).

    ``n`` queries generated, ``k`` documents per retriever and query, ``top_n`` fused documents
    quoted (None keeps the strategy's defaults and each retriever's own ``k``); ``fusion``
    replaces the strategy's; ``include_original`` (flat strategies) searches the question too;
    ``mode`` (decomposition) is ``"recursive"`` (default) or ``"individual"``;
    ``query_prompt`` / ``prompt`` / ``synthesis_prompt`` replace the strategy's prompts.

    >>> # chain_for("rag-fusion", [bm25, vectors], llm, return_sources=True).invoke("What is RRF?")
    """
    record = strategies.get(strategy)
    if mode is not None and record.grouping != "sub-questions":
        raise ValueError(f"mode applies to decomposition, not {record.name}")
    mode = mode or "recursive"
    if n is not None and record.default_n is None:
        raise ValueError(f"n: {record.name} writes one query; n applies to counted strategies")
    if include_original is not None and record.grouping != "flat":
        raise ValueError(f"include_original applies to flat strategies, not {record.name}")
    count = n or record.default_n or 1
    search_question = record.searches_question if include_original is None else include_original
    if record.grouping == "sub-questions":
        search_question = mode == "recursive"
    given = retrievers if isinstance(retrievers, MultiRetriever) else MultiRetriever(retrievers)
    multi, chosen_fusion = given.weighted_for(fusion) if fusion else (given, record.default_fusion)
    recorded = "raise" if multi.on_error == "raise" else "record"  # warned once a call, by retrieve
    fan_out = multi.model_copy(update={"name": "fan_out", "k": k or multi.k, "on_error": recorded})
    if chosen_fusion.with_scores:
        raise ValueError("fusion must return Documents: use with_scores=False")
    kept = top_n or chosen_fusion.top_n or record.default_top_n
    chosen_fusion = chosen_fusion.model_copy(update={"name": "fusion", "top_n": kept})  # checked
    query_step, answer, sub_answer = _model_steps(
        record, llm, count, mode, query_prompt, prompt, synthesis_prompt
    )
    parts = _Steps(
        record,
        query_step,
        fan_out,
        chosen_fusion,
        answer,
        sub_answer,
        search_question=search_question,
        count=count,
        return_sources=return_sources,
    )
    counted = [N_SPEC] * bool(record.default_n)  # the query step declares it too, if any
    steps = [  # each declares its settings and its parts' (a model's alternatives): LangServe's
        Step("generate_queries", parts.generate, parts.agenerate, counted, Question, [query_step]),
        Step("retrieve", parts.retrieve, parts.aretrieve, [K_SPEC], parts=[fan_out]),
        Step("fuse", parts.fuse, settings=[TOP_N_SPEC]),
        Step("format_context", _formatted if record.grouping == "flat" else _formatted_apart),
        RunnableLambda(parts.answer, afunc=parts.aanswer, name="answer"),  # a generator: streamed
    ]
    if sub_answer is not None:  # decomposition: each sub-question answered before the question
        steps.insert(4, Step("answer_sub_questions", parts.sub_answers, parts.asub_answers))
    metadata = {"strategy": record.name, "n": count, "k": k, "offline": llm is None}
    shown_mode = {"mode": mode} if record.grouping == "sub-questions" else {}  # offline too
    metadata |= {"top_n": chosen_fusion.top_n, **shown_mode}
    tags = [record.name, "offline"] if llm is None else [record.name]
    return RunnableBinding(
        bound=RunnableSequence(*steps, name=record.name + "-sources" * return_sources),  # LangServe
        config={"run_name": record.name, "tags": tags, "metadata": metadata},
        config_factories=[partial(_call_config, [K_SPEC, TOP_N_SPEC, *counted])],
        custom_output_type=dict if return_sources else str,
    )


def retrieval_chain(
    strategy: str | Strategy,
    retrievers: Retrievers,
    llm: Runnable[Any, Any] | None = None,
    **options: Any,
) -> Runnable[Any, State]:
    """A ready chain's steps up to ``format_context``: the question to its retrieval state
    (``question``, ``queries``, ``retrieved`` ranked lists, ``documents``, ``failures``,
    ``context``). Options as :func:`chain_for`, but for the answer's.

    >>> # retrieval_chain("multi-query", [bm25], n=2).invoke("What is RRF?")["documents"]
    """
    if answer_options := sorted(options.keys() & {"prompt", "synthesis_prompt", "return_sources"}):
        raise TypeError(f"retrieval_chain stops before the answer: {answer_options} do not apply")
    steps, _, ready = _split(chain_for(strategy, retrievers, llm, **options), "format_context")
    bound: Runnable[Any, Any] = RunnableSequence(*steps, name=f"{ready.bound.name}-retrieval")
    return ready.model_copy(update={"bound": bound, "custom_output_type": State})


def with_step(chain: Runnable[Any, Any], step: Runnable[Any, Any], *, after: str) -> Runnable:
    """``chain`` (a ready chain) with ``step`` inserted after the step named ``after``, keeping
    its name, tags, metadata and types. ``step`` maps the state dict to the state dict, e.g. a
    reranker ``RunnablePassthrough.assign(documents=lambda s: rerank(s))`` after ``"fuse"``; after
    ``"answer"``, it maps the answer."""
    head, tail, binding = _split(chain, after)
    named: Runnable[Any, Any] = RunnableSequence(*head, step, *tail, name=binding.bound.name)
    return binding.model_copy(update={"bound": named})


def _named(strategy: str) -> partial[Runnable[Any, Any]]:
    """:func:`chain_for` with ``strategy`` given (then retrievers, llm, its options), documented by
    the strategy's record, so that ``help()`` says what it does."""
    record, factory = strategies.get(strategy), partial(chain_for, strategy)
    counted = f"; n={record.default_n} by default" if record.default_n else ""
    factory.__doc__ = f"The {strategy} ready chain: {record.description}{counted}. See chain_for."
    return factory


multi_query_chain = _named("multi-query")
rag_fusion_chain = _named("rag-fusion")
decomposition_chain = _named("decomposition")
step_back_chain = _named("step-back")
hyde_chain = _named("hyde")
rewrite_chain = _named("rewrite")
