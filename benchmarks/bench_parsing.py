"""Time QueryListParser.parse on 1 MB of hostile model output (issue 22 item 3): each case should
parse in under a second, and 1 MB should cost at most 15x what 64 KB costs (linear growth).

    nice python benchmarks/bench_parsing.py
"""

from __future__ import annotations

import statistics
import time
import warnings

from rag_fusion_chain.query_parsing import QueryListParser

MEGABYTE = 1_000_000


def hostile_outputs(size: int) -> dict[str, str]:
    """Model outputs of about ``size`` characters that made the old parser superlinear."""
    json_items = '", "'.join(f"query {index}" for index in range(size // 12))
    return {
        "newlines": "\n" * size,
        "spaces and newlines": " \n" * (size // 2),
        "blank lines, then one query": "\n" * size + "solar power",
        "CJK marker 一、": "一、" * (size // 2),
        "numbered markers on one line": "1. " * (size // 3),
        "dash markers": "- " * (size // 2),
        "nested ((1.": "((1. " * (size // 5),
        "preamble lines a:": "a:\n" * (size // 3),
        "JSON list": f'["{json_items}"]',
    }


def median_seconds(text: str, repeats: int) -> float:
    """Median wall time of parsing ``text``, the output-bound warning silenced."""
    parser = QueryListParser()
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(repeats):
            started = time.perf_counter()
            parser.parse(text)
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    small, large = hostile_outputs(64_000), hostile_outputs(MEGABYTE)
    print("| case | 64 KB (ms) | 1 MB (ms) | ratio |\n|---|---|---|---|")
    for name in large:
        small_time, large_time = median_seconds(small[name], 5), median_seconds(large[name], 5)
        print(
            f"| {name} | {small_time * 1000:.1f} | {large_time * 1000:.1f} "
            f"| {large_time / small_time:.1f}x |"
        )


if __name__ == "__main__":
    main()
