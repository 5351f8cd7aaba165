"""``rag-fusion index --update`` against a full rebuild, after changing 1% of a folder.

A folder of Markdown files (synthetic English, about nine 300-token chunks per file) is indexed
once; then 1% of its files are rewritten and, in each round, the update (``build_index(...,
update=True)``) and a full rebuild (``force=True``) of the same folder run back to back, in
alternating order, each on a copy of the same starting index. Times are medians over the rounds;
the ratio is the same round's update over rebuild. ``--embedding fake`` (LangChain's
``DeterministicFakeEmbedding``, 384 dimensions) times the machinery; ``--embedding minilm`` the
kit's default model. The seconds per stage come from the ``on_progress`` callback. The files
are dated an hour back (else, written just before the first build, they would all be "racily
clean" and read again by the update).

    nice python benchmarks/bench_update.py --chunks 10000 --rounds 5 --embedding fake
    nice python benchmarks/bench_update.py --chunks 500 --rounds 3 --embedding minilm
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rag_fusion_chain import models
from rag_fusion_chain.retrievers.index_directory import build_index

WORDS = [
    "heat",
    "pump",
    "solar",
    "panel",
    "wind",
    "turbine",
    "battery",
    "storage",
    "grid",
    "voltage",
    "current",
    "energy",
    "tidal",
    "geothermal",
    "well",
    "compressor",
    "refrigerant",
    "winter",
    "summer",
    "efficiency",
    "cost",
    "install",
    "roof",
    "cell",
    "silicon",
    "offshore",
    "farm",
    "blade",
    "tower",
    "inverter",
    "meter",
    "demand",
    "supply",
    "price",
    "market",
    "policy",
]
CHUNKS_PER_FILE = 9
"""What one file of :func:`file_text` splits into at the default chunk size (measured)."""


def paragraph(generator: random.Random) -> str:
    sentences = []
    for _ in range(6):
        words = [generator.choice(WORDS) for _ in range(generator.randint(8, 16))]
        sentences.append(" ".join(words).capitalize() + ".")
    return " ".join(sentences)


def file_text(generator: random.Random, title: str) -> str:
    """About ``CHUNKS_PER_FILE`` chunks of 300 tokens."""
    paragraphs = [paragraph(generator) for _ in range(25)]
    return f"# {title}\n\n" + "\n\n".join(paragraphs)


def write_folder(folder: Path, files: int) -> None:
    """The files, dated an hour back: a folder edited well before it is first indexed."""
    generator = random.Random(0)
    folder.mkdir(parents=True)
    past = time.time_ns() - 3600 * 10**9
    for number in range(files):
        path = folder / f"note-{number:05d}.md"
        path.write_text(file_text(generator, f"Note {number}"))
        os.utime(path, ns=(past, past))


def change_files(folder: Path, share: float) -> int:
    """Rewrite ``share`` of the files (spread over the folder); return how many."""
    generator = random.Random(1)
    files = sorted(folder.iterdir())
    count = max(1, round(len(files) * share))
    changed = files[:: len(files) // count][:count]
    for path in changed:
        path.write_text(file_text(generator, f"Changed {path.stem}"))
    return len(changed)


STAGES = {
    "before load": "resolve the embeddings",
    "load": "read, hash, split",
    "bm25": "BM25 (update: from the previous counts)",
    "embed": "embed, FAISS (update: and read the previous vectors), switch index.json",
}


class StageClock:
    """Seconds from each progress stage's announcement to the next (the last one to the end)."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float]] = []

    def __call__(self, stage: str, advance: int, total: int) -> None:
        if advance == 0 and (not self.marks or self.marks[-1][0] != stage):
            self.marks.append((stage, time.perf_counter()))

    def seconds(self, end: float) -> dict[str, float]:
        times = [mark[1] for mark in self.marks[1:]] + [end]
        return {stage: stop - start for (stage, start), stop in zip(self.marks, times, strict=True)}


def timed(folder: Path, out: Path, embeddings: Any, **options: Any) -> tuple[float, dict, dict]:
    clock = StageClock()
    started = time.perf_counter()
    settings = build_index([folder], out, embedding=embeddings, on_progress=clock, **options)
    end = time.perf_counter()
    return (
        end - started,
        clock.seconds(end) | {"before load": clock.marks[0][1] - started},
        settings,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--share", type=float, default=0.01, help="share of files changed")
    parser.add_argument("--embedding", default="fake", help="fake, or a models.embeddings name")
    arguments = parser.parse_args()
    from langchain_core.embeddings import DeterministicFakeEmbedding

    if arguments.embedding == "fake":
        embeddings: Any = DeterministicFakeEmbedding(size=384)
    else:
        embeddings = models.embeddings(arguments.embedding)
    work = Path(tempfile.mkdtemp(prefix="bench-update-"))
    try:
        folder = work / "notes"
        write_folder(folder, max(1, arguments.chunks // CHUNKS_PER_FILE))
        _, _, first = timed(folder, work / "start", embeddings)
        changed = change_files(folder, arguments.share)
        rows = []
        for number in range(arguments.rounds):
            order = ("update", "rebuild") if number % 2 == 0 else ("rebuild", "update")
            result = {}
            for kind in order:
                out = work / f"{kind}-{number}"
                shutil.copytree(work / "start", out, symlinks=True)
                options = {"update": True} if kind == "update" else {"force": True}
                result[kind] = timed(folder, out, embeddings, **options)
                shutil.rmtree(out)
            rows.append(result)
            update, rebuild = result["update"][0], result["rebuild"][0]
            print(
                f"round {number + 1}: update {update:.2f} s, rebuild {rebuild:.2f} s, "
                f"ratio {update / rebuild:.3f}",
                flush=True,
            )
        report(arguments, first, changed, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(arguments: Any, first: dict, changed: int, rows: list[dict]) -> None:
    updated = rows[-1]["update"][2]
    print(
        f"\n{first['files']} files, {first['chunks']} chunks; {changed} files rewritten "
        f"({changed / first['files']:.1%}); the update embedded {updated['embedded_chunks']} "
        f"chunks ({updated['embedded_chunks'] / updated['chunks']:.1%}); embedding "
        f"{arguments.embedding}; {arguments.rounds} rounds\n"
    )
    print("| | update | full rebuild | update / rebuild |")
    print("|---|---|---|---|")
    update = statistics.median(row["update"][0] for row in rows)
    rebuild = statistics.median(row["rebuild"][0] for row in rows)
    ratio = statistics.median(row["update"][0] / row["rebuild"][0] for row in rows)
    print(f"| total, median s | {update:.2f} | {rebuild:.2f} | **{ratio:.3f}** |")
    for stage, label in STAGES.items():
        values = [
            statistics.median(row[kind][1].get(stage, 0.0) for row in rows)
            for kind in ("update", "rebuild")
        ]
        print(f"| {label}, median s | {values[0]:.2f} | {values[1]:.2f} | |")


if __name__ == "__main__":
    main()
