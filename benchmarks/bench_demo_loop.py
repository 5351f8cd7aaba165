"""Consecutive ``rag-fusion demo`` runs with a per-run timeout: exit codes, durations, hangs.

Each run is a fresh ``python -m rag_fusion_chain.cli demo`` process on this repository's code,
offline (no chat model; the environment of ``bench_cold_start.py``, one index cache for all runs). A run that passes ``--timeout`` counts as a hang: it gets SIGABRT, so
that ``PYTHONFAULTHANDLER`` prints every thread's stack, and the stack is kept in the log. Each run
is appended to ``--log`` (JSON lines) as it ends, so an interrupted loop keeps its runs;
``--summarize LOG`` prints the table of a log without running anything.

    python benchmarks/bench_demo_loop.py --runs 3                        # a small first look
    nice python benchmarks/bench_demo_loop.py --runs 200 --log demo_loop.jsonl
    python benchmarks/bench_demo_loop.py --summarize demo_loop.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_cold_start import REPOSITORY, environment  # the same offline child environment

ANSWER_MARK = "[offline extractive answer]"
KEPT_OUTPUT = 20_000
"""Characters of a failed or hung run's stderr kept in the log (every thread's stack fits)."""


def run_once(number: int, timeout: float, cache: Path) -> dict[str, Any]:
    """One demo process: its exit code, duration, whether it answered or hung."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "rag_fusion_chain.cli", "demo"],
        env={**environment(cache), "PYTHONFAULTHANDLER": "1"},
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    hung = False
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        process.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
        try:
            stdout, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
    record: dict[str, Any] = {
        "run": number,
        "exit_code": process.returncode,
        "seconds": round(time.monotonic() - started, 2),
        "answered": ANSWER_MARK in stdout,
        "hung": hung,
    }
    if hung or process.returncode or not record["answered"]:
        record["stderr"] = stderr[-KEPT_OUTPUT:]
    return record


def summary(records: list[dict[str, Any]]) -> str:
    """A markdown table of the runs: counts, exit codes, median and max duration of good runs."""
    good = [record["seconds"] for record in records if record["answered"] and not record["hung"]]
    codes: dict[int, int] = {}
    for record in records:
        codes[record["exit_code"]] = codes.get(record["exit_code"], 0) + 1
    rows = [
        ("runs", str(len(records))),
        ("answered, exit 0", str(sum(r["answered"] and not r["exit_code"] for r in records))),
        ("hangs (timeout passed)", str(sum(record["hung"] for record in records))),
        ("exit codes", ", ".join(f"{code}: {count}" for code, count in sorted(codes.items()))),
        ("median s (answered runs)", f"{statistics.median(good):.1f}" if good else "-"),
        ("max s (answered runs)", f"{max(good):.1f}" if good else "-"),
        ("min s (answered runs)", f"{min(good):.1f}" if good else "-"),
    ]
    return "\n".join(["| measure | value |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=120.0, help="Seconds per run.")
    parser.add_argument("--log", type=Path, help="Append each run to this JSON-lines file.")
    parser.add_argument("--summarize", type=Path, help="Print the table of a log and stop.")
    options = parser.parse_args()
    if options.summarize:
        print(summary(read_log(options.summarize)))
        return
    records = []
    cache = Path(tempfile.mkdtemp(prefix="demo-loop-"))  # the runs share it, as a user's do
    for number in range(1, options.runs + 1):
        record = run_once(number, options.timeout, cache)
        records.append(record)
        if options.log:
            with options.log.open("a", encoding="utf-8") as log:
                log.write(json.dumps(record) + "\n")
        state = "HUNG" if record["hung"] else f"exit {record['exit_code']}"
        print(f"run {number}: {state}, {record['seconds']} s", file=sys.stderr, flush=True)
    print(summary(records))
    print(f"\ntimeout {options.timeout:g} s per run, {os.cpu_count()} CPUs, code in {REPOSITORY}")


if __name__ == "__main__":
    main()
