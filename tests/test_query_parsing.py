"""QueryListParser on hostile model output: bounded, linear, and still correct (issue 22 item 3)."""

from __future__ import annotations

import statistics
import time
import warnings

import pytest

from rag_fusion_chain.query_parsing import MAX_OUTPUT_CHARS, QueryListParser, clean_query_line


def _median_parse_seconds(text: str, repeats: int = 5) -> float:
    parser = QueryListParser()
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(repeats):
            started = time.perf_counter()
            parser.parse(text)
            times.append(time.perf_counter() - started)
    return statistics.median(times)


@pytest.mark.parametrize("unit", ["\n", " \n", "一、", "1. ", "- ", "((1. ", "a:\n", '"'], ids=repr)
def test_parse_time_grows_linearly_from_64_kb_to_1_mb(unit: str) -> None:
    """A complexity check, not a timing target: 1 MB costs at most 15x what 64 KB costs."""
    small = _median_parse_seconds(unit * (64_000 // len(unit)))
    large = _median_parse_seconds(unit * (1_000_000 // len(unit)))
    assert large <= 15 * small + 0.05, (small, large)


def test_output_longer_than_the_bound_is_cut_with_a_warning_naming_it() -> None:
    text = "1. solar power\n" + "\n" * MAX_OUTPUT_CHARS + "2. wind power\n"
    with pytest.warns(UserWarning, match=f"max_chars={MAX_OUTPUT_CHARS}"):
        assert QueryListParser().parse(text) == ["solar power"]


def test_the_bound_is_configurable_and_shared_by_invoke_and_stream() -> None:
    parser = QueryListParser(max_chars=20)
    text = "1. solar power\n2. wind power\n3. tidal power\n"
    with pytest.warns(UserWarning, match="max_chars=20"):
        invoked = parser.invoke(text)
    with pytest.warns(UserWarning, match="max_chars=20"):
        streamed = [q for chunk in parser.transform(iter(text)) for q in chunk]
    assert invoked == streamed == ["solar power", "wi"]


def test_no_warning_within_the_bound() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert QueryListParser().parse("\n" * 1000 + "solar power") == ["solar power"]


def test_blank_lines_before_a_json_list_still_read_as_json() -> None:
    assert QueryListParser().parse("\n\n  \n" + '["solar power", "wind power"]') == [
        "solar power",
        "wind power",
    ]


def test_json_nested_beyond_the_parser_s_depth_is_read_as_lines() -> None:
    # json.loads raised RecursionError (not ValueError): the whole reply was lost
    assert QueryListParser().parse("1. solar power\n" + "[" * 50_000) == ["solar power"]


@pytest.mark.parametrize(
    ("line", "query"),
    [
        ("一、一、光伏发电", "光伏发电"),
        ('1. 2) - **"solar power"**', "solar power"),
        ('""""solar""""', "solar"),
        ("  - 1. wind  ", "wind"),
    ],
)
def test_repeated_markers_and_wrappers_are_all_removed(line: str, query: str) -> None:
    assert clean_query_line(line) == query
