"""Query generation: one question in, search queries (or one text) out, as plain LCEL.

Each factory returns ``prompt | llm | parser`` wrapped in a named runnable that checks the
input (a ``str`` or ``{"question": str}``) and never gives nothing: with no usable output, or a
model error, the result is the question itself, with a warning (``on_failure="raise"`` raises).

>>> from langchain_core.language_models import FakeListChatModel
>>> generate = rag_fusion(FakeListChatModel(responses=["1. solar power\\n2. wind power"]), n=2)
>>> generate.invoke("renewable energy")
['solar power', 'wind power']
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Literal, NoReturn

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.utils import ConfigurableFieldSpec, get_unique_config_specs

from rag_fusion_chain import prompts
from rag_fusion_chain.fusion.runnables import traced_call
from rag_fusion_chain.query_parsing import (
    QueryListParser,
    dedupe_key,
    searchable_text,
    within_query_limit,
)
from rag_fusion_chain.validation import MAX_QUERIES, Question, question_of, validate_count

OnFailure = Literal["warn", "raise"]
Prompt = BasePromptTemplate | None  # a query step's own prompt when None


def configured_count(
    config: RunnableConfig | None, name: str, built: Any, upper: int | None = None
) -> Any:
    """The per-call count ``config={"configurable": {name: ...}}`` (checked), else ``built``:
    None keeps it too, as LangServe sends every unset setting as None."""
    value = ((config or {}).get("configurable") or {}).get(name)
    return built if value is None else validate_count(name, value, upper)


def count_setting(name: str, description: str) -> ConfigurableFieldSpec:
    """A per-call count a step reads from ``config["configurable"]`` (None: the built one)."""
    return ConfigurableFieldSpec(id=name, annotation=int | None, name=name, description=description)


N_SPEC = count_setting("n", "Queries generated")


def _refused(keywords: dict[str, Any]) -> NoReturn:
    """A step's ``func`` takes (input, config) only: a keyword given to a call of a step or of a
    ready chain (``chain.invoke(q, top_n=3)``) is a TypeError saying where per-call settings go."""
    settings = ", ".join(f'"{name}": {value!r}' for name, value in keywords.items())
    raise TypeError(
        f"unexpected keyword argument {next(iter(keywords))!r}: per-call settings go in "
        f'config={{"configurable": {{{settings}}}}}'
    )


class Step(RunnableLambda):  # type: ignore[type-arg]
    """A named step (a query step, a ready chain's): one node in ``get_graph()``, one run in a
    trace, declaring for ``config_schema()`` the per-call settings it reads and its ``parts``'
    (read only when asked: a call needs none); ``func`` takes (input, config).
    ``RunnablePassthrough.assign`` would add its parallel map and two runs a step."""

    InputType: Any = dict  # what it takes, for its schema (LangServe, as_tool): set per step

    def __init__(
        self,
        name: str,
        func: Callable[[Any, RunnableConfig], Any],
        afunc: Callable[[Any, RunnableConfig], Any] | None = None,
        settings: Sequence[ConfigurableFieldSpec] = (),
        input_type: Any = dict,  # a ready chain's state
        parts: Sequence[Runnable[Any, Any] | None] = (),  # None: no part
    ) -> None:
        super().__init__(func, afunc=afunc, name=name)
        self.settings, self.InputType, self.parts = list(settings), input_type, list(parts)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """``RunnableLambda.invoke`` as one traced run, without its signature reading on every
        call (0.25 ms a step; benchmarks/results/latency.md); ``func`` takes no keywords."""
        return traced_call(self, _refused(kwargs) if kwargs else self.func, input, config)  # type: ignore[arg-type]

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return await super().ainvoke(input, config) if not kwargs else _refused(kwargs)

    def transform(
        self, input: Iterator[Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        return super().transform(input, config) if not kwargs else _refused(kwargs)

    def atransform(
        self, input: AsyncIterator[Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        return super().atransform(input, config) if not kwargs else _refused(kwargs)

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        of_parts = [spec for part in self.parts if part for spec in part.config_specs]
        return get_unique_config_specs([*super().config_specs, *self.settings, *of_parts])

    def get_graph(self, config: RunnableConfig | None = None) -> Any:
        return Runnable.get_graph(self, config)


def _fallback(question: str, problem: str | Exception, on_failure: OnFailure, up: int = 5) -> str:
    """The question itself, with a warning, when the model gave nothing usable (``problem``) or
    raised (``problem`` is the error); ``on_failure="raise"`` raises instead. The warning names
    the frame ``up`` calls above (the caller of the query step)."""
    if on_failure == "raise" and isinstance(problem, Exception):
        raise problem
    if on_failure == "raise":
        raise ValueError(f"query generation failed: {problem}")
    reason = problem if isinstance(problem, str) else f"{type(problem).__name__}: {problem}"
    message = f"query generation failed ({reason}); using the original question itself"
    warnings.warn(message, stacklevel=up)
    return question


def _queries(
    question: str, generated: list[str], include_original: bool, on_failure: OnFailure
) -> list[str]:
    echo = dedupe_key(question)  # the question echoed back is no new query
    new = [query for query in generated if dedupe_key(query) != echo]  # parsed: unique already
    if not new:
        return [_fallback(question, "the model returned no usable query", on_failure, up=6)]
    return [question, *new] if include_original else new


def checked_llm(llm: Any) -> Runnable[Any, Any]:
    """``llm`` if it is a chat model or another Runnable, else a TypeError naming what came."""
    if not isinstance(llm, Runnable):
        hint = " (no model: see rag_fusion_chain.offline)" if llm is None else ""
        raise TypeError(f"llm must be a chat model or a Runnable, got {type(llm).__name__}{hint}")
    return llm


def _query_list(
    llm: Runnable[Any, Any],
    prompt: BasePromptTemplate,
    n: int,
    include_original: bool,
    on_failure: OnFailure,
) -> Runnable[Any, list[str]]:
    """``prompt | llm | QueryListParser`` for ``n`` queries (``n`` configurable per call)."""
    validate_count("n", n, MAX_QUERIES)  # prompts ignore the values they do not use (n)
    checked_llm(llm)

    def generate(value: Any, config: RunnableConfig) -> list[str]:
        question, count = question_of(value), configured_count(config, "n", n, MAX_QUERIES)
        model = prompt | llm | QueryListParser(n=count)
        try:
            generated = model.invoke({"question": question, "n": count}, config)
        except Exception as error:
            return [_fallback(question, error, on_failure)]
        return _queries(question, generated, include_original, on_failure)

    async def agenerate(value: Any, config: RunnableConfig) -> list[str]:
        question, count = question_of(value), configured_count(config, "n", n, MAX_QUERIES)
        model = prompt | llm | QueryListParser(n=count)
        try:
            generated = await model.ainvoke({"question": question, "n": count}, config)
        except Exception as error:
            return [_fallback(question, error, on_failure)]
        return _queries(question, generated, include_original, on_failure)

    return Step("generate_queries", generate, agenerate, [N_SPEC], Question)


def _text(
    llm: Runnable[Any, Any], prompt: BasePromptTemplate, single_line: bool, on_failure: OnFailure
) -> Runnable[Any, str]:
    """``prompt | llm | StrOutputParser`` for one text; the question when nothing usable comes."""
    model = prompt | checked_llm(llm) | StrOutputParser()

    def finish(question: str, text: str) -> str:
        if single_line:
            text = next(iter(QueryListParser(n=1).parse(text)), "")
        text = within_query_limit(searchable_text(text, single_line=False).strip())
        return text or _fallback(question, "the model returned no usable text", on_failure, up=6)

    def generate(value: Any, config: RunnableConfig) -> str:
        question = question_of(value)
        try:
            return finish(question, model.invoke({"question": question}, config))
        except Exception as error:
            return _fallback(question, error, on_failure)

    async def agenerate(value: Any, config: RunnableConfig) -> str:
        question = question_of(value)
        try:
            return finish(question, await model.ainvoke({"question": question}, config))
        except Exception as error:
            return _fallback(question, error, on_failure)

    return Step("generate_text", generate, agenerate, input_type=Question)


def multi_query(
    llm: Runnable[Any, Any],
    n: int = 5,
    *,
    include_original: bool = False,
    prompt: Prompt = None,
    on_failure: OnFailure = "warn",
) -> Runnable[Any, list[str]]:
    """Rephrase the question ``n`` ways, from several perspectives (multi-query retrieval)."""
    return _query_list(llm, prompt or prompts.MULTI_QUERY_PROMPT, n, include_original, on_failure)


def rag_fusion(
    llm: Runnable[Any, Any],
    n: int = 4,
    *,
    include_original: bool = False,
    prompt: Prompt = None,
    on_failure: OnFailure = "warn",
) -> Runnable[Any, list[str]]:
    """Generate ``n`` related search queries whose results are fused by rank (RAG-Fusion)."""
    return _query_list(llm, prompt or prompts.RAG_FUSION_PROMPT, n, include_original, on_failure)


def decomposition(
    llm: Runnable[Any, Any], n: int = 3, *, prompt: Prompt = None, on_failure: OnFailure = "warn"
) -> Runnable[Any, list[str]]:
    """Break the question into at most ``n`` sub-questions, easiest first."""
    return _query_list(llm, prompt or prompts.DECOMPOSITION_PROMPT, n, False, on_failure)


def step_back(
    llm: Runnable[Any, Any], *, prompt: Prompt = None, on_failure: OnFailure = "warn"
) -> Runnable[Any, str]:
    """Ask the more general question behind the question (few-shot prompted)."""
    return _text(llm, prompt or prompts.STEP_BACK_PROMPT, True, on_failure)


def hyde(
    llm: Runnable[Any, Any], *, prompt: Prompt = None, on_failure: OnFailure = "warn"
) -> Runnable[Any, str]:
    """Write a hypothetical passage answering the question, to search with (HyDE)."""
    return _text(llm, prompt or prompts.HYDE_PROMPT, False, on_failure)


def rewrite(
    llm: Runnable[Any, Any], *, prompt: Prompt = None, on_failure: OnFailure = "warn"
) -> Runnable[Any, str]:
    """Rewrite the question into one better search query (Rewrite-Retrieve-Read, Ma et al. 2023)."""
    return _text(llm, prompt or prompts.REWRITE_PROMPT, True, on_failure)
