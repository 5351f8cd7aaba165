"""Query generation: the parser on messy model output, generators, fallbacks, call styles."""

from __future__ import annotations

import asyncio
import re
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.language_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableGenerator, RunnableLambda

from rag_fusion_chain import prompts, queries, validation
from rag_fusion_chain.query_parsing import QueryListParser, dedupe_key
from rag_fusion_chain.validation import question_of

# ---------------------------------------------------------------- parser


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Here are 4 search queries:\n1. solar panels\n2) wind farms\n(3) tidal power\n4、geothermal",
            ["solar panels", "wind farms", "tidal power", "geothermal"],
        ),
        (
            "- **Solar** panels cost\n* \"wind farms\"\n• 'tidal power'\n\n\n",
            ["Solar panels cost", "wind farms", "tidal power"],
        ),
        ("**solar panels**\n`wind farms`", ["solar panels", "wind farms"]),
        (
            "以下是4个搜索查询：\n1. 光伏发电效率\n2、风力发电成本\n①潮汐能\n一、地热能的利用",
            ["光伏发电效率", "风力发电成本", "潮汐能", "地热能的利用"],
        ),
        ("“光伏发电的原理”\n「风能」\n（3）核能", ["光伏发电的原理", "风能", "核能"]),
        ("Query 1: solar\nQuery 2: wind", ["solar", "wind"]),
        ('["solar", "wind", "solar"]', ["solar", "wind"]),
        ('```json\n{"queries": ["solar", "wind"]}\n```', ["solar", "wind"]),
        ("Here are the queries:\x1b[0m\n1. solar\n> wind：", ["solar"]),  # preamble lines
        ('Queries:\n["solar:", "wind"]', ["solar:", "wind"]),  # a JSON item is never a heading
    ],
)
def test_parser_cleans_messy_output(text: str, expected: list[str]) -> None:
    assert QueryListParser().parse(text) == expected


def test_parser_dedupes_ignoring_case_and_spacing_and_keeps_at_most_n() -> None:
    text = "Solar Power\nsolar  power\nSOLARPOWER\nwind\ntides\ngeothermal"
    assert QueryListParser(n=3).parse(text) == ["Solar Power", "wind", "tides"]


def test_parser_drops_blank_and_punctuation_only_lines() -> None:
    assert QueryListParser().parse("\n  \n---\n...\n1.\nreal query") == ["real query"]


def test_a_streamed_reply_parses_as_the_whole_reply() -> None:
    chunks = ["1. sol", "ar\n2. wi", "nd\n3. tides"]
    assert list(QueryListParser().transform(iter(chunks))) == [["solar", "wind", "tides"]]
    assert QueryListParser().parse("".join(chunks)) == ["solar", "wind", "tides"]


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300), st.integers(1, 10))
def test_parser_property_never_returns_empty_or_blank_queries(text: str, n: int) -> None:
    parsed = QueryListParser(n=n).parse(text)
    assert len(parsed) <= n
    assert all(query.strip() == query and query for query in parsed)
    assert len({dedupe_key(query) for query in parsed}) == len(parsed)


# ---------------------------------------------------------------- input


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("   ", ValueError, "empty"),
        ({"query": "x"}, ValueError, "'question'"),
        (42, TypeError, "str"),
        ("x" * (validation.MAX_QUESTION_CHARS + 1), ValueError, "limit"),
        ("\x00" + "x" * validation.MAX_QUESTION_CHARS, ValueError, "limit"),  # and not printable
        ({"question": 42}, TypeError, "question must be a str, got int"),
        ("\u200b\x00", ValueError, "empty"),
        ("solar\ud800", ValueError, "not valid Unicode"),
    ],
)
def test_question_validation(value: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        question_of(value)  # type: ignore[arg-type]


def test_a_question_at_the_limit_or_with_invisible_characters_passes() -> None:
    longest = "x" * validation.MAX_QUESTION_CHARS
    assert question_of({"question": f" {longest} "}) == longest
    assert question_of("solar\u200bpower\x00") == "solar\u200bpower\x00"


@pytest.mark.parametrize(
    ("n", "error", "message"),
    [
        (0, ValueError, "n must be positive, got 0$"),
        (-1, ValueError, "n must be positive, got -1$"),
        (
            validation.MAX_QUERIES + 1,
            ValueError,
            f"n must be at most {validation.MAX_QUERIES}, got",
        ),
        (True, TypeError, "n must be an int, got bool"),
    ],
)
def test_n_is_validated(n: int, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        queries.rag_fusion(FakeListChatModel(responses=["x"]), n=n)


# ---------------------------------------------------------------- generators


def model(*replies: str) -> FakeListChatModel:
    return FakeListChatModel(responses=list(replies))


@pytest.mark.parametrize(
    ("factory", "prompt"),
    [
        (queries.multi_query, prompts.MULTI_QUERY_PROMPT),
        (queries.rag_fusion, prompts.RAG_FUSION_PROMPT),
        (queries.decomposition, prompts.DECOMPOSITION_PROMPT),
    ],
)
def test_list_generators_use_their_prompt_and_n(factory, prompt) -> None:  # type: ignore[no-untyped-def]
    seen_prompts: list[str] = []

    def record(value):  # type: ignore[no-untyped-def]
        seen_prompts.append(value.to_string())
        return AIMessage(content="a\nb\nc\nd\ne\nf")

    generator = factory(RunnableLambda(record), n=2)
    assert generator.invoke({"question": "What is fusion?"}) == ["a", "b"]
    offered = {"question": "What is fusion?", "n": 2}
    values = {key: value for key, value in offered.items() if key in prompt.input_variables}
    assert seen_prompts == [prompt.invoke(values).to_string()]


def test_the_question_echoed_back_is_no_new_query() -> None:
    generator = queries.rag_fusion(model("what is  RAG?\nretrieval augmented generation"), n=2)
    assert generator.invoke("What is RAG?") == ["retrieval augmented generation"]
    with pytest.warns(UserWarning, match="no usable query"):
        assert queries.rag_fusion(model("WHAT IS RAG?")).invoke("What is RAG?") == ["What is RAG?"]


def test_include_original_puts_question_first_once() -> None:
    generator = queries.multi_query(
        model("What is RAG?\nretrieval augmented generation"), n=3, include_original=True
    )
    assert generator.invoke("What is RAG?") == ["What is RAG?", "retrieval augmented generation"]


@pytest.mark.parametrize("reply", ["", "Here are the queries:", "\n\n  \n"])
def test_unusable_output_falls_back_to_the_question_with_a_warning(reply: str) -> None:
    with pytest.warns(UserWarning, match="original question"):
        assert queries.rag_fusion(model(reply)).invoke("Q?") == ["Q?"]


def test_on_failure_raise() -> None:
    with pytest.raises(ValueError, match="query generation failed"):
        queries.rag_fusion(model("Here are the queries:"), on_failure="raise").invoke("Q?")


def test_model_error_falls_back_or_raises() -> None:
    def broken(_):  # type: ignore[no-untyped-def]
        raise ConnectionError("model down")

    with pytest.warns(UserWarning, match="ConnectionError"):
        assert queries.multi_query(RunnableLambda(broken)).invoke("Q?") == ["Q?"]
    with pytest.raises(ConnectionError):
        queries.multi_query(RunnableLambda(broken), on_failure="raise").invoke("Q?")


def _broken(_):  # type: ignore[no-untyped-def]
    raise ConnectionError("model down")


def _stops_after_one_line(_):  # type: ignore[no-untyped-def]
    yield "solar power\n"
    raise ConnectionError("model down")


async def _astops_after_one_line(_):  # type: ignore[no-untyped-def]
    yield "solar power\n"
    raise ConnectionError("model down")


@pytest.mark.parametrize(
    ("generator", "message"),
    [
        (queries.rag_fusion(RunnableLambda(_broken)), "query generation failed"),
        (queries.rag_fusion(model("Here are the queries:")), "no usable query"),
        (
            queries.rag_fusion(RunnableGenerator(_stops_after_one_line, _astops_after_one_line)),
            "query generation failed",
        ),
        (
            queries.rag_fusion(RunnableLambda(_broken), include_original=True),
            "query generation failed",
        ),
        (queries.hyde(RunnableLambda(_broken)), "generation failed"),
        (queries.hyde(model("   ")), "no usable text"),
    ],
)
@pytest.mark.parametrize("style", ["invoke", "stream", "ainvoke", "astream"])
def test_fallback_warnings_name_the_caller_not_this_package(  # type: ignore[no-untyped-def]
    generator, message: str, style: str
) -> None:
    async def astream() -> list[object]:
        return [chunk async for chunk in generator.astream("Q?")]

    calls = {
        "invoke": lambda: generator.invoke("Q?"),
        "stream": lambda: list(generator.stream("Q?")),
        "ainvoke": lambda: asyncio.run(generator.ainvoke("Q?")),
        "astream": lambda: asyncio.run(astream()),
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calls[style]()
    assert [message in str(warning.message) for warning in caught] == [True]
    assert caught[0].filename != queries.__file__


def test_same_query_repeated_and_too_many_queries() -> None:
    assert queries.rag_fusion(model("same\nsame\nSAME"), n=4).invoke("Q?") == ["same"]
    fifty = "\n".join(f"query {index}" for index in range(50))
    assert len(queries.rag_fusion(model(fifty), n=4).invoke("Q?")) == 4


def test_n_is_configurable_per_call() -> None:
    generator = queries.rag_fusion(model("a\nb\nc\nd"), n=4)
    assert generator.invoke("Q?", config={"configurable": {"n": 2}}) == ["a", "b"]
    assert generator.invoke("Q?", config={"configurable": {"n": None}}) == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match="n"):
        generator.invoke("Q?", config={"configurable": {"n": 0}})


@pytest.mark.parametrize("call", ["invoke", "ainvoke", "batch", "abatch", "stream"])
def test_a_keyword_is_refused_alike_sync_and_async_pointing_to_configurable(call: str) -> None:
    """``invoke(q, n=1)`` raised a TypeError naming the step's private body; per-call settings
    are configurable (``config={"configurable": {"n": 1}}``), and the error says so."""
    generator = queries.rag_fusion(model("a\nb\nc\nd"), n=4)
    question = ["Q?"] if "batch" in call else "Q?"

    def run() -> Any:
        result = getattr(generator, call)(question, n=1, k=2)
        return asyncio.run(result) if call.startswith("a") else list(result)

    settings = '{"configurable": {"n": 1, "k": 2}}'
    with pytest.raises(TypeError, match=f"keyword argument 'n': .* config={re.escape(settings)}$"):
        run()


def test_every_call_style() -> None:
    generator = queries.rag_fusion(
        GenericFakeChatModel(messages=iter([AIMessage("a\nb")] * 6)), n=2
    )
    assert generator.invoke("Q?") == ["a", "b"]
    assert asyncio.run(generator.ainvoke("Q?")) == ["a", "b"]
    assert generator.batch(["Q1", "Q2"]) == [["a", "b"], ["a", "b"]]

    async def collect() -> list[list[str]]:
        return [chunk async for chunk in generator.astream("Q?")]

    assert asyncio.run(collect()) == [["a", "b"]]
    assert asyncio.run(generator.abatch(["Q?"])) == [["a", "b"]]
    assert generator.get_name() == "generate_queries"


def test_step_back_keeps_one_clean_line_and_hyde_keeps_the_passage() -> None:
    assert queries.step_back(model('1. "What is photosynthesis?"\nextra')).invoke("Q?") == (
        "What is photosynthesis?"
    )
    passage = "Photosynthesis turns light into chemical energy.\nIt happens in chloroplasts."
    assert queries.hyde(model(passage)).invoke({"question": "Q?"}) == passage
    assert asyncio.run(queries.hyde(model(passage)).ainvoke("Q?")) == passage
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert queries.hyde(model("   ")).invoke("Q?") == "Q?"
    assert any("question itself" in str(warning.message) for warning in caught)


def test_step_back_prompt_is_few_shot() -> None:
    messages = prompts.STEP_BACK_PROMPT.format_messages(question="Q?")
    assert len(messages) >= 2 + 2 * 2  # system, at least two examples, the question
    assert messages[-1].content == "Q?"


@pytest.mark.parametrize("factory", [queries.rag_fusion, queries.multi_query, queries.hyde])
def test_a_query_step_declares_the_question_it_takes_so_it_becomes_a_tool(factory: Any) -> None:
    """lcuser31: the query steps' input schema was untyped (``Any``), so LangServe showed no
    question field and ``as_tool`` raised "Tool input must be str or dict" where ``prompt | llm |
    parser`` becomes a tool; the steps take what the ready chains take."""
    step = factory(model("alpha\nbeta"))
    assert step.get_input_jsonschema()["required"] == ["question"]
    tool = step.as_tool(name="search_queries", description="Queries for a question")
    assert tool.invoke({"question": "Q?"}) in (["alpha", "beta"], "alpha\nbeta")


@pytest.mark.parametrize("name", ["multi_query", "rag_fusion", "decomposition", "step_back"])
@pytest.mark.parametrize("llm", [None, "gpt-4o-mini"])
def test_a_query_step_without_a_chat_model_is_refused_when_built(name: str, llm: object) -> None:
    """``queries.rag_fusion(models.chat_model())`` with no model configured (None) was built, and
    the first invoke failed in LangChain's words: "Expected a Runnable, callable or dict.Instead
    got an unsupported type: <class 'NoneType'>"; now it is refused at once, naming ``llm``."""
    with pytest.raises(
        TypeError, match=r"llm must be a chat model or a Runnable, got (NoneType|str)"
    ):
        getattr(queries, name)(llm)
