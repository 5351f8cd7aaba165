"""Query generation: turn one question into several search queries (or one passage).

Factories return Runnables whose input is a ``str`` or ``{"question": str}``:

>>> from langchain_core.language_models import FakeListChatModel
>>> generate = rag_fusion(FakeListChatModel(responses=["1. solar power\\n2. wind power"]), n=2)
>>> generate.invoke("renewable energy")
['solar power', 'wind power']

Whatever the model returns, the result is never empty: with nothing usable, it is the original
question alone (with a warning; ``on_failure="raise"`` raises instead).
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
)
from langchain_core.language_models import BaseLanguageModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.config import patch_config
from pydantic import ConfigDict, Field

from rag_fusion_chain import prompts
from rag_fusion_chain.query_parsing import (
    QueryListParser,
    clean_query_line,
    dedupe_key,
    searchable_text,
    within_query_limit,
)
from rag_fusion_chain.validation import (
    MAX_QUERIES,
    MAX_QUESTION_CHARS,
    QuestionInput,
    question_of,
    validate_count,
)

OnFailure = Literal["warn", "raise"]


# --------------------------------------------------------------------------------------------
# Generators
# --------------------------------------------------------------------------------------------


class QueryStep(RunnableSerializable[QuestionInput, list[str]]):
    """A ``generate_queries`` step: streams its queries as list chunks (each searched as it
    arrives) and returns them all from ``invoke``. Subclasses write ``_stream_queries`` and
    ``_astream_queries`` (the model is awaited natively, so the stream is never collapsed)."""

    def _stream_queries(
        self,
        inputs: Iterator[QuestionInput],
        run_manager: CallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> Iterator[list[str]]:
        raise NotImplementedError

    def _astream_queries(
        self,
        inputs: AsyncIterator[QuestionInput],
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> AsyncIterator[list[str]]:
        raise NotImplementedError

    def stream(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[list[str]]:
        yield from self._transform_stream_with_config(iter([input]), self._stream_queries, config)

    async def astream(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[list[str]]:
        async def one() -> AsyncIterator[QuestionInput]:
            yield input

        async for chunk in self._atransform_stream_with_config(
            one(), self._astream_queries, config
        ):
            yield chunk

    def invoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[str]:
        return [query for chunk in self.stream(input, config) for query in chunk]

    async def ainvoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[str]:
        return [query async for chunk in self.astream(input, config) for query in chunk]


class QueryGenerator(QueryStep):
    """Prompt a chat model for ``n`` queries and parse them; never returns an empty list.

    ``include_original=True`` puts the question itself first (it is then streamed before the model
    answers, so retrieval can start at once). On model errors or unusable output the result is the
    original question alone, with a warning, unless ``on_failure="raise"``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str | None = "generate_queries"
    llm: Runnable[Any, Any]
    prompt: BasePromptTemplate = Field(default=prompts.RAG_FUSION_PROMPT)
    n: int = 4
    include_original: bool = False
    on_failure: OnFailure = "warn"

    def model_post_init(self, context: Any) -> None:
        validate_count("n", self.n, MAX_QUERIES)

    def _model_chain(self) -> Runnable[dict[str, Any], list[str]]:
        return self.prompt | self.llm | QueryListParser(n=self.n)

    def _prompt_values(self, question: str) -> dict[str, Any]:
        values = {"question": question, "n": self.n}
        return {key: value for key, value in values.items() if key in self.prompt.input_variables}

    def _stream_queries(
        self,
        inputs: Iterator[QuestionInput],
        run_manager: CallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> Iterator[list[str]]:
        for value in inputs:
            question = question_of(value)
            streamed = _StreamedQueries(self, question)
            yield from streamed.start()
            child = patch_config(config, callbacks=run_manager.get_child())
            error: Exception | None = None
            try:
                for chunk in self._model_chain().stream(self._prompt_values(question), child):
                    yield from streamed.add(chunk)
            except Exception as caught:  # noqa: BLE001 - re-raised, or reported by streamed.end
                if self.on_failure == "raise":
                    raise
                error = caught
            yield from streamed.end(error)

    async def _astream_queries(
        self,
        inputs: AsyncIterator[QuestionInput],
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> AsyncIterator[list[str]]:
        async for value in inputs:
            question = question_of(value)
            streamed = _StreamedQueries(self, question)
            for queries in streamed.start():
                yield queries
            child = patch_config(config, callbacks=run_manager.get_child())
            error: Exception | None = None
            try:
                async for chunk in self._model_chain().astream(
                    self._prompt_values(question), child
                ):
                    for queries in streamed.add(chunk):
                        yield queries
            except Exception as caught:  # noqa: BLE001 - re-raised, or reported by streamed.end
                if self.on_failure == "raise":
                    raise
                error = caught
            for queries in streamed.end(error):
                yield queries


class _StreamedQueries:
    """Bookkeeping of one question's queries, shared by the sync and async query streams.

    Each method returns the chunks to yield (one query each), so the two streams differ only in
    how they iterate the model. Warnings skip this frame and the stream's (``stacklevel=3``), to
    name the code that drives the stream.
    """

    def __init__(self, generator: QueryGenerator, question: str) -> None:
        self.generator = generator
        self.question = question
        self.seen = {dedupe_key(question)}
        self.emitted = 0

    def start(self) -> list[list[str]]:
        """The question itself when it goes first, so retrieval can start before the model."""
        if not self.generator.include_original:
            return []
        self.emitted += 1
        return [[self.question]]

    def add(self, chunk: list[str]) -> list[list[str]]:
        """The queries of one parsed model chunk not streamed yet (the question counts)."""
        new = []
        for query in chunk:
            if dedupe_key(query) not in self.seen:
                self.seen.add(dedupe_key(query))
                new.append([query])
        self.emitted += len(new)
        return new

    def end(self, error: Exception | None) -> list[list[str]]:
        """After the model stream ended, or failed with ``error``: the question alone if nothing
        was streamed (``ValueError`` with ``on_failure="raise"``), else nothing (a warning on
        failure)."""
        if self.emitted == 0:
            reason = "the model returned no usable query"
            if error is not None:
                reason = f"{type(error).__name__}: {error}"
            if self.generator.on_failure == "raise":
                raise ValueError(f"query generation failed: {reason}")
            warnings.warn(
                f"query generation failed ({reason}); using the original question alone",
                stacklevel=3,
            )
            return [[self.question]]
        if error is not None:
            warnings.warn(
                f"query generation stopped early ({type(error).__name__}: {error})", stacklevel=3
            )
        return []


class TextGenerator(RunnableSerializable[QuestionInput, str]):
    """Prompt a chat model for one text (a step-back question or a HyDE passage).

    With ``single_line=True`` the first usable line is kept, cleaned like a query. Empty output or
    a model error gives the original question, with a warning, unless ``on_failure="raise"``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str | None = "generate_queries"
    llm: Runnable[Any, Any]
    prompt: BasePromptTemplate
    single_line: bool = False
    on_failure: OnFailure = "warn"

    def _generate(
        self, value: QuestionInput, run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> str:
        question = question_of(value)
        child = patch_config(config, callbacks=run_manager.get_child())
        try:
            text = self._model_chain().invoke({"question": question}, child)
        except Exception as error:  # noqa: BLE001 - re-raised, or reported by _recover
            if self.on_failure == "raise":
                raise
            return self._recover(question, error)
        return self._finish(question, text)

    async def _agenerate(
        self,
        value: QuestionInput,
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> str:
        question = question_of(value)
        child = patch_config(config, callbacks=run_manager.get_child())
        try:
            text = await self._model_chain().ainvoke({"question": question}, child)
        except Exception as error:  # noqa: BLE001 - re-raised, or reported by _recover
            if self.on_failure == "raise":
                raise
            return self._recover(question, error)
        return self._finish(question, text)

    def _model_chain(self) -> Runnable[dict[str, Any], str]:
        return self.prompt | self.llm | StrOutputParser()

    def _recover(self, question: str, error: Exception) -> str:
        """The question itself after a model error (``on_failure="warn"``); called by
        ``_generate``/``_agenerate``, so ``stacklevel=3`` names their caller."""
        warnings.warn(
            f"generation failed ({type(error).__name__}: {error}); using the question itself",
            stacklevel=3,
        )
        return question

    def _finish(self, question: str, text: str) -> str:
        if self.single_line:
            lines = QueryListParser(n=1).parse(text)
            text = lines[0] if lines else ""
        text = within_query_limit(searchable_text(text, single_line=False).strip())
        if not text:
            if self.on_failure == "raise":
                raise ValueError("generation failed: the model returned no usable text")
            warnings.warn(
                "the model returned no usable text; using the question itself", stacklevel=3
            )
            return question
        return text

    def invoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> str:
        return self._call_with_config(self._generate, input, config)

    async def ainvoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> str:
        return await self._acall_with_config(self._agenerate, input, config)


# --------------------------------------------------------------------------------------------
# Factories
# --------------------------------------------------------------------------------------------


def _query_generator(
    llm: BaseLanguageModel | Runnable[Any, Any],
    n: int,
    include_original: bool,
    prompt: BasePromptTemplate | None,
    default_prompt: BasePromptTemplate,
    on_failure: OnFailure,
) -> QueryGenerator:
    return QueryGenerator(
        llm=llm,
        prompt=prompt or default_prompt,
        n=n,
        include_original=include_original,
        on_failure=on_failure,
    )


def multi_query(
    llm: BaseLanguageModel | Runnable[Any, Any],
    n: int = 5,
    *,
    include_original: bool = False,
    prompt: BasePromptTemplate | None = None,
    on_failure: OnFailure = "warn",
) -> QueryGenerator:
    """Rephrase the question ``n`` ways, from several perspectives (multi-query retrieval)."""
    return _query_generator(
        llm, n, include_original, prompt, prompts.MULTI_QUERY_PROMPT, on_failure
    )


def rag_fusion(
    llm: BaseLanguageModel | Runnable[Any, Any],
    n: int = 4,
    *,
    include_original: bool = False,
    prompt: BasePromptTemplate | None = None,
    on_failure: OnFailure = "warn",
) -> QueryGenerator:
    """Generate ``n`` related search queries whose results are fused by rank (RAG-Fusion)."""
    return _query_generator(llm, n, include_original, prompt, prompts.RAG_FUSION_PROMPT, on_failure)


def decomposition(
    llm: BaseLanguageModel | Runnable[Any, Any],
    n: int = 3,
    *,
    include_original: bool = False,
    prompt: BasePromptTemplate | None = None,
    on_failure: OnFailure = "warn",
) -> QueryGenerator:
    """Break the question into at most ``n`` sub-questions, easiest first."""
    return _query_generator(
        llm, n, include_original, prompt, prompts.DECOMPOSITION_PROMPT, on_failure
    )


def step_back(
    llm: BaseLanguageModel | Runnable[Any, Any],
    *,
    prompt: BasePromptTemplate | None = None,
    on_failure: OnFailure = "warn",
) -> TextGenerator:
    """Ask the more general question behind the question (few-shot prompted)."""
    return TextGenerator(
        llm=llm, prompt=prompt or prompts.STEP_BACK_PROMPT, single_line=True, on_failure=on_failure
    )


def hyde(
    llm: BaseLanguageModel | Runnable[Any, Any],
    *,
    prompt: BasePromptTemplate | None = None,
    on_failure: OnFailure = "warn",
) -> TextGenerator:
    """Write a hypothetical passage answering the question, to search with (HyDE)."""
    return TextGenerator(llm=llm, prompt=prompt or prompts.HYDE_PROMPT, on_failure=on_failure)


__all__ = [
    "MAX_QUERIES",
    "MAX_QUESTION_CHARS",
    "QueryGenerator",
    "QueryListParser",
    "QueryStep",
    "TextGenerator",
    "clean_query_line",
    "decomposition",
    "dedupe_key",
    "hyde",
    "multi_query",
    "question_of",
    "rag_fusion",
    "searchable_text",
    "step_back",
    "validate_count",
]
