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

import json
import re
import unicodedata
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
)
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.output_parsers import BaseTransformOutputParser, StrOutputParser
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.config import patch_config
from pydantic import ConfigDict, Field

from rag_fusion_chain import prompts
from rag_fusion_chain.validation import (
    MAX_QUERIES,
    MAX_QUESTION_CHARS,
    QuestionInput,
    question_of,
    validate_count,
)

OnFailure = Literal["warn", "raise"]


# --------------------------------------------------------------------------------------------
# Parsing model output into queries
# --------------------------------------------------------------------------------------------

_LIST_MARKER = re.compile(
    r"""^\s*(?:
        [-*+>]\s+ | [•·▪◦]\s*                        # bullets and quote marks
      | \(?\d{1,3}\s*[.)、:：．]\s*                     # 1.  1)  (1.  3、
      | \(\d{1,3}\)\s* | （\d{1,3}）\s*                 # (1)  （1）
      | [\u2460-\u2473\u2776-\u277f]\s*                # ①..⑳ ❶..❿
      | [一二三四五六七八九十]{1,3}\s*[、.．:：]\s*       # 一、
      | (?:query|q|问题|查询)\s*\d{1,3}\s*[.:：)]\s*     # Query 1:  问题1：
    )""",
    re.VERBOSE | re.IGNORECASE,
)
_WRAPPERS = [
    ("**", "**"),
    ("__", "__"),
    ("*", "*"),
    ("_", "_"),
    ("`", "`"),
    ('"', '"'),
    ("'", "'"),
    ("“", "”"),
    ("‘", "’"),
    ("「", "」"),
    ("『", "』"),
    ("《", "》"),
]
_PREAMBLE_END = (":", "：")
_INLINE_EMPHASIS = re.compile(r"(\*\*|__)(.+?)\1")
_TERMINAL_ESCAPE = re.compile(
    r"""\x1b\[[0-?]*[ -/]*[@-~]               # CSI: colours, cursor moves (ESC [ ... m)
      | \x9b[0-?]*[ -/]*[@-~]                 # CSI, 8-bit form
      | \x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?   # OSC: window titles, hyperlinks
      | \x1b[ -/]*[0-~]                        # other escape sequences
    """,
    re.VERBOSE,
)


def searchable_text(text: str, *, single_line: bool = True) -> str:
    """``text`` without terminal escape sequences and control or format characters.

    Models can emit NUL, ANSI colour codes, bidirectional overrides (U+202E) and zero-width
    characters; none of them helps a search, and they hide or disguise text wherever queries
    are shown. Tabs and other control whitespace become spaces, and line breaks too when
    ``single_line``. Applied to every generated query and passage before it is searched.

    >>> searchable_text("\\x1b[31msolar\\x1b[0m\\u202e power\\u200b\\x00")
    'solar power'
    """
    if text.isprintable():
        return text
    kept = []
    for character in _TERMINAL_ESCAPE.sub("", text):
        if character == "\n" and not single_line:
            kept.append(character)
        elif character.isspace():
            kept.append(" ")
        elif character.isprintable() or unicodedata.category(character) not in ("Cc", "Cf", "Cs"):
            kept.append(character)  # printable, or private-use / unassigned: text, not control
    return "".join(kept)


def _within_query_limit(text: str) -> str:
    """``text``, cut to :data:`MAX_QUESTION_CHARS` with a warning when longer: a generated
    query is searched under the same bound as a question."""
    if len(text) <= MAX_QUESTION_CHARS:
        return text
    warnings.warn(
        f"a generated query of {len(text)} characters was cut to its first "
        f"{MAX_QUESTION_CHARS} (the question length limit) before searching",
        stacklevel=2,
    )
    return text[:MAX_QUESTION_CHARS].rstrip()


def clean_query_line(line: str) -> str:
    """Strip control characters (:func:`searchable_text`), list markers, markdown emphasis and
    surrounding quotes from one line.

    >>> clean_query_line('2) **"How do vaccines work?"**')
    'How do vaccines work?'
    >>> clean_query_line("一、光伏发电的效率")
    '光伏发电的效率'
    """
    text = unicodedata.normalize("NFC", searchable_text(line))
    text = _INLINE_EMPHASIS.sub(r"\2", text).strip()
    previous = None
    while text != previous:
        previous = text
        text = _LIST_MARKER.sub("", text, count=1).strip()
        for opening, closing in _WRAPPERS:
            if (
                len(text) > len(opening) + len(closing)
                and text.startswith(opening)
                and (text.endswith(closing))
            ):
                text = text[len(opening) : len(text) - len(closing)].strip()
    return text


def _is_usable(query: str, raw_line: str) -> bool:
    if not query or not any(character.isalnum() for character in query):
        return False
    return not raw_line.rstrip().endswith(_PREAMBLE_END)  # "Here are 4 search queries:"


def dedupe_key(query: str) -> str:
    """Queries equal ignoring case and spacing share this key."""
    return "".join(query.split()).casefold()


def _json_queries(text: str) -> list[str] | None:
    """Queries from a JSON list, or from the first list value of a JSON object; else None."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.strip("`").removeprefix("json").strip()
    if not stripped.startswith(("[", "{")):
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    if isinstance(data, dict):
        data = next((value for value in data.values() if isinstance(value, list)), None)
    if not isinstance(data, list):
        return None
    return [
        item if isinstance(item, str) else json.dumps(item, ensure_ascii=False) for item in data
    ]


class _QueryCollector:
    """Accumulates cleaned, de-duplicated queries line by line, up to ``limit``."""

    def __init__(self, limit: int | None, seen: set[str] | None = None) -> None:
        self.limit = limit
        self.seen = set(seen or ())
        self.queries: list[str] = []

    @property
    def full(self) -> bool:
        return self.limit is not None and len(self.queries) >= self.limit

    def add(self, raw_line: str, *, check_preamble: bool = True) -> str | None:
        """Add one raw line; return the cleaned query if it is new and usable."""
        if self.full:
            return None
        line = searchable_text(raw_line)
        query = clean_query_line(line)
        if not _is_usable(query, line if check_preamble else query):
            return None
        query = _within_query_limit(query)
        key = dedupe_key(query)
        if key in self.seen:
            return None
        self.seen.add(key)
        self.queries.append(query)
        return query


class QueryListParser(BaseTransformOutputParser[list[str]]):
    """Turn model text into clean queries: one per line, numbering, bullets, quotes, markdown
    emphasis and preamble lines removed, de-duplicated ignoring case and spacing, at most ``n``.

    Streams: with ``.stream()`` each query is emitted (as a one-item list) as soon as its line is
    complete. A JSON list (or an object holding one) is accepted too.

    >>> QueryListParser(n=2).parse("Here are 2 queries:\\n1. Solar power\\n2. solar  POWER\\n3. Wind")
    ['Solar power', 'Wind']
    """

    n: int | None = None

    @property
    def _type(self) -> str:
        return "query_list"

    def parse(self, text: str) -> list[str]:
        # The streaming path, fed at once: ``invoke`` and ``stream`` must agree, e.g. on a
        # preamble line followed by a JSON list.
        lines = _IncrementalQueries(self)
        return [*lines.feed(text), *lines.finish()]

    def _parse_block(self, text: str) -> list[str]:
        """Queries of a block read whole: a JSON list (or object holding one), else lines."""
        collector = _QueryCollector(self.n)
        json_items = _json_queries(text)
        if json_items is not None:
            for item in json_items:
                collector.add(item, check_preamble=False)
        else:
            for line in text.splitlines():
                collector.add(line)
        return collector.queries

    def _transform(self, input: Iterator[str | BaseMessage]) -> Iterator[list[str]]:
        lines = _IncrementalQueries(self)
        for chunk in input:
            yield from ([query] for query in lines.feed(_text_of(chunk)))
        yield from ([query] for query in lines.finish())

    async def _atransform(
        self, input: AsyncIterator[str | BaseMessage]
    ) -> AsyncIterator[list[str]]:
        lines = _IncrementalQueries(self)
        async for chunk in input:
            for query in lines.feed(_text_of(chunk)):
                yield [query]
        for query in lines.finish():
            yield [query]


def _text_of(chunk: str | BaseMessage) -> str:
    return chunk if isinstance(chunk, str) else chunk.text


_JSON_START = re.compile(r"\s*(?:\[|\{|```)")


class _IncrementalQueries:
    """Feeds streamed text to a collector and returns each query once its line is complete.

    Text of an unfinished line is kept as a list of pieces and joined once the line ends, so a
    long line streamed in many small chunks costs time in proportion to its length.
    """

    def __init__(self, parser: QueryListParser) -> None:
        self.parser = parser
        self.collector = _QueryCollector(parser.n)
        self.pending: list[str] = []
        self.waiting_for_json = False

    def feed(self, text: str) -> list[str]:
        """Queries of the lines completed by ``text``; from a line opening JSON on, wait.

        Lines are taken one at a time, so the result does not depend on how text is chunked.
        """
        if self.waiting_for_json or "\n" not in text:
            self.pending.append(text)
            return []
        buffer = "".join([*self.pending, text])
        queries: list[str] = []
        start = 0
        while not (json_starts := bool(_JSON_START.match(buffer, start))):
            end = buffer.find("\n", start)
            if end < 0:
                break
            query = self.collector.add(buffer[start:end])
            if query is not None:
                queries.append(query)
            start = end + 1
        self.waiting_for_json = json_starts  # JSON is parsed once complete
        self.pending = [buffer[start:]]
        return queries

    def finish(self) -> list[str]:
        rest = "".join(self.pending)
        if _JSON_START.match(rest):
            candidates = self.parser._parse_block(rest)
            return [q for q in candidates if self.collector.add(q, check_preamble=False)]
        query = self.collector.add(rest)
        return [query] if query is not None else []


# --------------------------------------------------------------------------------------------
# Generators
# --------------------------------------------------------------------------------------------


class QueryGenerator(RunnableSerializable[QuestionInput, list[str]]):
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
        text = _within_query_limit(searchable_text(text, single_line=False).strip())
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
