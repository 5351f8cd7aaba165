"""Consecutive ``rag-fusion demo`` runs with a per-run timeout: exit codes, durations, hangs.

Each run is a fresh ``python -m rag_fusion_chain.cli demo`` process on this repository's code,
offline (the child environment of ``bench_cold_start.py``; one index cache for all runs). Each run
records when its answer appeared, when it exited, its CPU time and the load average at its start.
A run past ``--timeout`` counts as a hang: it is watched for 5 s (CPU used: busy but slow, or
blocked), then gets SIGABRT so that ``PYTHONFAULTHANDLER`` prints every thread's stack into the
log. Runs are appended to ``--log`` (JSON lines) as they end; ``--summarize LOG`` prints a log's
table without running anything.

    python benchmarks/bench_demo_loop.py --runs 3                        # a small first look
    nice python benchmarks/bench_demo_loop.py --runs 200 --log demo_loop.jsonl
    python benchmarks/bench_demo_loop.py --summarize demo_loop.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from bench_cold_start import REPOSITORY, environment  # the same offline child environment

ANSWER_MARK = "[offline extractive answer]"
CPU_WATCH = 5.0
"""Seconds a run past its timeout is watched for CPU use before it is aborted."""
KEPT_OUTPUT = 20_000
"""Characters of a failed or hung run's stderr kept in the log (every thread's stack fits)."""


def _process_cpu(pid: int) -> float:
    """CPU seconds a live process has used, all threads (``/proc/PID/stat`` utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed_lines(stream: IO[str], started: float, lines: list[tuple[float, str]]) -> None:
    lines.extend((time.monotonic() - started, line) for line in stream)


def _stop(process: subprocess.Popen[str]) -> float:
    """Watch a late run's CPU use, then abort it with a stack dump; the CPU seconds watched."""
    before = _process_cpu(process.pid)
    time.sleep(CPU_WATCH)
    busy = _process_cpu(process.pid) - before
    process.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return round(busy, 2)


def run_once(number: int, timeout: float, cache: Path) -> dict[str, Any]:
    """One demo process: exit code, durations, CPU time, whether it answered or hung."""
    load, cpu_before = os.getloadavg()[0], _children_cpu()
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "rag_fusion_chain.cli", "demo"],
        env={**environment(cache), "PYTHONFAULTHANDLER": "1"},
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout: list[tuple[float, str]] = []
    stderr: list[tuple[float, str]] = []
    readers = [
        threading.Thread(target=_timed_lines, args=(pipe, started, lines))
        for pipe, lines in ((process.stdout, stdout), (process.stderr, stderr))
    ]
    for reader in readers:
        reader.start()
    try:
        process.wait(timeout=timeout)
        busy = None
    except subprocess.TimeoutExpired:
        busy = _stop(process)
    for reader in readers:
        reader.join()
    answered = [at for at, line in stdout if ANSWER_MARK in line]
    record: dict[str, Any] = {
        "run": number,
        "exit_code": process.returncode,
        "seconds": round(time.monotonic() - started, 2),
        "answer_seconds": round(answered[0], 2) if answered else None,
        "answered": bool(answered),
        "hung": busy is not None,
        "cpu_seconds": round(_children_cpu() - cpu_before, 2),
        "load": round(load, 1),
    }
    if busy is not None:
        record["cpu_seconds_while_watched"] = busy
    if busy is not None or process.returncode or not answered:
        record["stderr"] = "".join(line for _, line in stderr)[-KEPT_OUTPUT:]
    return record


def _median_and_max(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} / {max(values):.1f}" if values else "-"


def summary(records: list[dict[str, Any]]) -> str:
    """A markdown table of the runs: counts, exit codes, durations of the runs that answered."""
    good = [record for record in records if record["answered"] and not record["hung"]]
    timed = [record for record in good if record.get("answer_seconds") is not None]
    hung = [record for record in records if record["hung"]]
    codes: dict[int, int] = {}
    for record in records:
        codes[record["exit_code"]] = codes.get(record["exit_code"], 0) + 1
    rows = [
        ("runs", len(records)),
        ("answered and exited 0", sum(not record["exit_code"] for record in good)),
        ("hangs (timeout passed)", len(hung)),
        ("... of which after the answer was printed", sum(run["answered"] for run in hung)),
        ("exit codes", ", ".join(f"{code}: {count}" for code, count in sorted(codes.items()))),
        ("start to exit, s", [record["seconds"] for record in good]),
        ("start to answer, s", [record["answer_seconds"] for record in timed]),
        ("answer to exit, s", [record["seconds"] - record["answer_seconds"] for record in timed]),
        ("CPU s per answered run", [record["cpu_seconds"] for record in timed]),
        ("load average at start", [record["load"] for record in records if "load" in record]),
    ]
    lines = [
        f"| {name} (median / max) | {_median_and_max(value)} |"
        if isinstance(value, list)
        else f"| {name} | {value} |"
        for name, value in rows
    ]
    return "\n".join(["| measure | value |", "|---|---|", *lines])


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
