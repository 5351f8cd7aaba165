"""How long QueryListParser takes on runaway model output (issue 22): 64 KB and 1 MB of the
shapes that used to be quadratic, with the default output bound and without it.

    python benchmarks/bench_parsing.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

from rag_fusion_chain.query_parsing import QueryListParser


def runaway_outputs(size: int) -> dict[str, str]:
    """Model outputs of about ``size`` characters, one per shape."""
    return {
        "newlines": "\n" * size,
        "spaces and newlines": " \n" * (size // 2),
        "blank lines, then one query": "\n" * (size - 8) + "solar pv",
        "CJK marker 一、": "一、" * (size // 2),
        "numbered markers on one line": "1. " * (size // 3),
        "dash markers": "- " * (size // 2),
        "nested ((1.": "((1." * (size // 4),
        "preamble lines a:": "a:\n" * (size // 3),
        "JSON list": json.dumps([f"query {i}" for i in range(size // 12)]),
    }


def median_seconds(parser: QueryListParser, text: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        parser.parse(text)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__)
    arguments.add_argument("--repeat", type=int, default=3)
    repeat = arguments.parse_args().repeat
    warnings.simplefilter("ignore")
    bounded = QueryListParser(n=4)
    unbounded = QueryListParser(n=4, max_output_chars=2**31)
    small, large = runaway_outputs(64 * 1024), runaway_outputs(1024 * 1024)
    print("| output | 64 KB (s) | 1 MB (s) | ratio | 1 MB, no bound (s) | ratio |")
    print("|---|---|---|---|---|---|")
    for shape in small:
        at_small = median_seconds(bounded, small[shape], repeat)
        at_large = median_seconds(bounded, large[shape], repeat)
        unbounded_small = median_seconds(unbounded, small[shape], repeat)
        unbounded_large = median_seconds(unbounded, large[shape], repeat)
        print(
            f"| {shape} | {at_small:.4f} | {at_large:.4f} | {at_large / at_small:.1f}x "
            f"| {unbounded_large:.4f} | {unbounded_large / unbounded_small:.1f}x |"
        )


if __name__ == "__main__":
    main()
