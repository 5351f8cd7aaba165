"""QueryListParser on runaway model output: bounded, linear, and never silent (issue 22)."""

from __future__ import annotations

import json
import statistics
import time
import warnings

import pytest

from rag_fusion_chain.query_parsing import MAX_OUTPUT_CHARS, QueryListParser


def _median_seconds(parser: QueryListParser, text: str, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        parser.parse(text)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def test_a_cut_output_warns_and_keeps_the_queries_before_the_bound() -> None:
    text = "1. solar power\n2. wind power\n" + "\n" * MAX_OUTPUT_CHARS + "3. tidal power"
    with pytest.warns(UserWarning, match="max_output_chars"):
        assert QueryListParser(n=5).parse(text) == ["solar power", "wind power"]


def test_output_within_the_bound_is_read_whole_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert QueryListParser(n=3, max_output_chars=40).parse("1. solar\n2. wind\n3. tidal") == [
            "solar",
            "wind",
            "tidal",
        ]


def test_the_bound_applies_to_streamed_output_too() -> None:
    parser = QueryListParser(n=5, max_output_chars=25)
    chunks = ["1. solar\n", "2. wind\n", "3. tidal power\n", "4. geothermal\n"]
    with pytest.warns(UserWarning, match="max_output_chars=25"):
        streamed = [query for part in parser.transform(iter(chunks)) for query in part]
    assert streamed == ["solar", "wind", "tidal"]  # the 25 characters end inside "3. tidal power"


def test_a_json_list_cut_by_the_bound_keeps_its_whole_items() -> None:
    text = json.dumps([f"query number {i}" for i in range(20_000)])
    with pytest.warns(UserWarning, match="max_output_chars"):
        assert QueryListParser(n=3).parse(text) == [
            "query number 0",
            "query number 1",
            "query number 2",
        ]


def test_repeated_leading_markers_are_stripped_in_one_pass() -> None:
    assert QueryListParser().parse("1. 2) - 一、 **solar power**") == ["solar power"]


@pytest.mark.parametrize(
    "shape",
    ["\n", " \n", "一、", "1. ", "- ", "((1.", "a:\n"],
    ids=["newlines", "spaces-newlines", "cjk-marker", "numbered", "dashes", "nested", "preamble"],
)
def test_parsing_time_grows_at_most_linearly_in_the_output(shape: str) -> None:
    """A complexity check, not a speed target: 16x the text may cost at most 15x the time.

    Before the fix, 64 KB of newlines alone took over 40 s (each line start rescanned the rest).
    """
    parser = QueryListParser(n=4)
    small = shape * (64 * 1024 // len(shape))
    large = shape * (1024 * 1024 // len(shape))
    parser.parse(small)  # warm the regex caches
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        at_small = _median_seconds(parser, small)
        at_large = _median_seconds(parser, large)
    assert at_large <= 15 * max(at_small, 0.002)


def test_blank_lines_before_a_query_are_skipped() -> None:
    assert QueryListParser().parse("\n" * 5000 + "solar power") == ["solar power"]
