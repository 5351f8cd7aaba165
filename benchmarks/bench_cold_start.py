"""Cold start: from process start to the first offline answer over the bundled sample.

Each run is a fresh Python process (nothing warm but the operating system's file cache), offline
(MiniLM from the local package, no chat model), answering ``data.SAMPLE_QUESTION``:

* ``template``: what a template serves, ``serving.build_chain("rag-fusion").invoke(...)``; the
  sample index is built in memory from the shipped vectors;
* ``template, no shipped vectors`` (the baseline, as before): the same with the shipped vectors
  switched off and an empty index cache, so the 300 abstracts are embedded first;
* ``rag-fusion demo``: the command, start to exit (it prints the answer last).

The child reports, relative to the moment the parent started it, when its imports were done,
when the embedding model was loaded, when the index was ready and when the answer came. Setups
alternate within each round; the table gives medians (min-max) and the baseline / template ratio
of the same run.

    python benchmarks/bench_cold_start.py             # 3 rounds
    python benchmarks/bench_cold_start.py --rounds 5 --no-baseline
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]

CHILD = """
import json, os, sys, time
started = float(os.environ["COLD_START_SPAWNED"])
def since() -> float:
    return round(time.time() - started, 2)
marks = {}
from rag_fusion_chain import data, models, serving
marks["imports"] = since()
if os.environ.get("COLD_START_NO_SHIPPED_VECTORS"):
    serving.with_shipped_vectors = lambda *arguments: None
models.embeddings()
marks["model"] = since()
serving.open_source(serving.IndexSource())
marks["index"] = since()
answer = serving.build_chain("rag-fusion").invoke({"question": data.SAMPLE_QUESTION})
marks["answer"] = since()
assert answer.strip()
print("COLD_START " + json.dumps(marks))
"""


def environment(cache: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("RAG_FUSION_", "OPENAI_"))
    }
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        RAG_FUSION_CHAT_MODEL="offline",
        RAG_FUSION_CACHE_DIR=str(cache),
        PYTHONPATH=str(REPOSITORY),
    )
    return env


def run_template(shipped: bool) -> dict[str, float]:
    """One fresh process answering through the template chain; its marks in seconds."""
    with tempfile.TemporaryDirectory() as cache:
        env = environment(Path(cache))
        if not shipped:
            env["COLD_START_NO_SHIPPED_VECTORS"] = "1"
        env["COLD_START_SPAWNED"] = repr(time.time())
        completed = subprocess.run(
            [sys.executable, "-c", CHILD],
            env=env,
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    if completed.returncode:
        raise RuntimeError(f"the child failed:\n{completed.stderr[-2000:]}")
    (line,) = [line for line in completed.stdout.splitlines() if line.startswith("COLD_START ")]
    return json.loads(line.removeprefix("COLD_START "))


def run_demo() -> dict[str, float]:
    """``rag-fusion demo`` start to exit, in seconds."""
    with tempfile.TemporaryDirectory() as cache:
        started = time.monotonic()
        completed = subprocess.run(
            [sys.executable, "-m", "rag_fusion_chain.cli", "demo"],
            env=environment(Path(cache)),
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
            timeout=900,
            check=True,
        )
        elapsed = time.monotonic() - started
    assert "[offline extractive answer]" in completed.stdout, completed.stdout[-500:]
    return {"answer": round(elapsed, 2)}


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-baseline", action="store_true", help="Skip the slow baseline.")
    options = parser.parse_args()

    setups = {
        "template": lambda: run_template(shipped=True),
        "rag-fusion demo": run_demo,
    }
    if not options.no_baseline:
        setups["template, no shipped vectors (baseline)"] = lambda: run_template(shipped=False)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in setups}
    for round_number in range(options.rounds):
        for name, run in setups.items():
            marks = run()
            results[name].append(marks)
            print(f"round {round_number + 1} {name}: {marks}", file=sys.stderr)

    print("| setup | imports | model loaded | index ready | first answer (s) |")
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        cells = [
            summary([run[mark] for run in runs]) if mark in runs[0] else "-"
            for mark in ("imports", "model", "index", "answer")
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if not options.no_baseline:
        baseline = statistics.median(
            run["answer"] for run in results["template, no shipped vectors (baseline)"]
        )
        template = statistics.median(run["answer"] for run in results["template"])
        print(f"\nbaseline / template (median first answer): {baseline / template:.2f}x")
    print(f"\n{options.rounds} rounds, medians (min-max), {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
