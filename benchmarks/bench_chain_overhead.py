"""The ready chain's own CPU cost: question to fused documents with an instant model and a
zero-latency retriever, against ``generator | retriever.map() | fusion`` in the same process.

Both fuse with bench_latency's StampedFusion; blocks of 30 calls alternate, 10 blocks each, and
the medians of the times to the fused documents are printed, with their difference.

    PYTHONPATH=$PWD python benchmarks/bench_chain_overhead.py --kind plain
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_latency as latency  # noqa: E402

from rag_fusion_chain import chains, queries  # noqa: E402

QUERY_LINES = ["heat pump winter cost", "solar panel battery", "wind turbine grid", "tidal"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", choices=["plain", "vector"], default="plain")
    parser.add_argument("--blocks", type=int, default=10)
    arguments = parser.parse_args()
    retrievers = latency.make_retrievers(arguments.kind, 1, 0.0, latency.Counter())
    llm = latency.SleepyChat(token_seconds=0.0, query_lines=QUERY_LINES)
    clock = latency.FuseClock()
    fusion = latency.StampedFusion(clock=clock)
    plain = queries.rag_fusion(llm, 4, include_original=True) | retrievers[0].map() | fusion
    ready = chains.rag_fusion_chain(retrievers, llm, n=4, include_original=True, fusion=fusion)
    calls: dict[str, Any] = {
        "map": lambda question: plain.invoke(question),
        "chain": lambda question: ready.invoke({"question": question}),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    for block in range(arguments.blocks + 1):  # the first block warms up
        for name, call in calls.items():
            for position in range(30):
                started = time.perf_counter()
                call(latency.QUESTIONS[position % len(latency.QUESTIONS)])
                assert clock.ended_at is not None
                if block:
                    times[name].append(clock.ended_at - started)
    mapped, chained = (statistics.median(times[name]) * 1000 for name in ("map", "chain"))
    print(
        f"{arguments.kind}: map {mapped:.2f} ms, chain {chained:.2f} ms, "
        f"chain - map {chained - mapped:.2f} ms ({chained / mapped:.3f}x)"
    )


if __name__ == "__main__":
    main()
