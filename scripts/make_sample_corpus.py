"""Regenerate the sample corpus shipped in ``rag_fusion_chain/data/`` from BEIR SciFact.

Usage::

    python scripts/make_sample_corpus.py /path/to/beir/scifact [--documents 300] [--queries 100]

The directory must hold the BEIR layout: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv``.
The selection is deterministic:

1. the test queries in the order of their first appearance in ``qrels/test.tsv``; the first
   ``--queries`` of them are kept, and every corpus document relevant to them is selected;
2. the selection is filled up to ``--documents`` with corpus documents at an even stride through
   the corpus (the next unselected document when the stride lands on a selected one).

Documents are written in corpus order, each line unchanged from ``corpus.jsonl``. The kept queries
are written with their relevant document ids, so that the sample can be evaluated too.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

DATA_DIRECTORY = Path(__file__).resolve().parent.parent / "rag_fusion_chain" / "data"
CORPUS_FILE = "scifact_sample.jsonl"
QUERIES_FILE = "scifact_sample_queries.jsonl"


def read_relevance(qrels_path: Path) -> dict[str, list[str]]:
    """Relevant corpus ids per query id, both in the order of first appearance in the file."""
    relevant: dict[str, list[str]] = {}
    with qrels_path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if int(row["score"]) > 0:
                relevant.setdefault(row["query-id"], []).append(row["corpus-id"])
    return relevant


def select_documents(corpus_ids: list[str], required: list[str], total: int) -> list[int]:
    """Positions of ``required`` documents plus evenly strided others, ``total`` in all, sorted."""
    position_of = {document_id: position for position, document_id in enumerate(corpus_ids)}
    selected = {position_of[document_id] for document_id in required}
    missing = total - len(selected)
    if missing < 0:
        raise ValueError(f"documents: {len(selected)} relevant documents exceed the total {total}")
    stride = len(corpus_ids) / max(missing, 1)
    for step in range(missing):
        position = int(step * stride)
        while position in selected:
            position = (position + 1) % len(corpus_ids)
        selected.add(position)
    return sorted(selected)


def main() -> None:
    """Parse the arguments and write the sample corpus and its queries."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("beir_directory", type=Path, help="BEIR SciFact directory")
    parser.add_argument("--documents", type=int, default=300, help="documents in the sample")
    parser.add_argument("--queries", type=int, default=100, help="test queries to keep")
    parser.add_argument("--out", type=Path, default=DATA_DIRECTORY, help="output directory")
    arguments = parser.parse_args()

    corpus_lines = (arguments.beir_directory / "corpus.jsonl").read_text("utf-8").splitlines()
    corpus_ids = [json.loads(line)["_id"] for line in corpus_lines]
    queries = {}
    with (arguments.beir_directory / "queries.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            query = json.loads(line)
            queries[query["_id"]] = query["text"]
    relevance = read_relevance(arguments.beir_directory / "qrels" / "test.tsv")
    kept_queries = list(relevance)[: arguments.queries]
    required = list(dict.fromkeys(d for q in kept_queries for d in relevance[q]))
    positions = select_documents(corpus_ids, required, arguments.documents)

    arguments.out.mkdir(parents=True, exist_ok=True)
    corpus_text = "".join(corpus_lines[position] + "\n" for position in positions)
    (arguments.out / CORPUS_FILE).write_text(corpus_text, encoding="utf-8")
    queries_text = "".join(
        json.dumps({"_id": query_id, "text": queries[query_id], "relevant": relevance[query_id]})
        + "\n"
        for query_id in kept_queries
    )
    (arguments.out / QUERIES_FILE).write_text(queries_text, encoding="utf-8")
    print(
        f"wrote {len(positions)} documents ({len(corpus_text.encode('utf-8'))} bytes) and "
        f"{len(kept_queries)} queries to {arguments.out}"
    )


if __name__ == "__main__":
    main()
