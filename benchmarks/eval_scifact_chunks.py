"""BM25 and dense retrieval over BEIR SciFact indexed in chunks, as ``rag-fusion index`` splits it.

``benchmarks/eval_scifact.py`` indexes whole abstracts; this indexes the chunks of
``ingest.split_documents`` (300 tokens, 50 of overlap by default) and scores each record by its best
chunk (a record's rank is that of its first chunk in the list), so the chunking itself is measured.
Run it once per version of the package (``PYTHONPATH``) and pass the first run's JSON as
``--baseline`` to the second: same queries, same retrievers, paired t-tests from ranx.

    python benchmarks/eval_scifact_chunks.py --out before.json             # on the old package
    python benchmarks/eval_scifact_chunks.py --baseline before.json --out after.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from langchain_core.documents import Document

from rag_fusion_chain import ingest
from rag_fusion_chain.evaluate import DEFAULT_CACHE_DIR, Indexes, compare_runs, load_beir
from rag_fusion_chain.evaluate.metrics import ranking_scores

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
METRICS = ["ndcg@10", "recall@100"]
DEPTH = 300
"""Chunks retrieved per query: enough for 100 distinct records in almost every list."""


def record_scores(chunks: Sequence[Document]) -> dict[str, float]:
    """A ranked list of chunks as record scores: each record at its best chunk's rank."""
    return ranking_scores([chunk.metadata["doc_id"] for chunk in chunks])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--chunk-size", type=int, default=ingest.DEFAULT_CHUNK_SIZE)
    parser.add_argument("--chunk-overlap", type=int, default=ingest.DEFAULT_CHUNK_OVERLAP)
    parser.add_argument("--retrievers", nargs="+", default=["bm25", "dense"])
    parser.add_argument("--baseline", type=Path, help="a previous run's --out, to compare with")
    parser.add_argument("--out", type=Path, required=True, help="JSON of the runs and scores")
    arguments = parser.parse_args(argv)

    started = time.perf_counter()
    dataset = load_beir(arguments.dataset)
    chunks = ingest.split_documents(
        dataset.corpus, chunk_size=arguments.chunk_size, chunk_overlap=arguments.chunk_overlap
    )
    titles = {record.id: record.metadata["title"] for record in dataset.corpus}
    title_only = sum(chunk.page_content == titles[chunk.metadata["doc_id"]] for chunk in chunks)
    print(f"{len(dataset.corpus)} records, {len(chunks)} chunks, {title_only} a title alone")
    indexes = Indexes(chunks, cache_dir=arguments.cache_dir, depth=DEPTH)
    query_ids = list(dataset.queries)
    texts = [dataset.queries[query_id] for query_id in query_ids]
    runs = {}
    for name in arguments.retrievers:
        retriever = indexes.bm25() if name == "bm25" else indexes.dense()
        lists = retriever.batch(texts)
        runs[name] = {
            qid: record_scores(found) for qid, found in zip(query_ids, lists, strict=True)
        }
    result = {"chunks": len(chunks), "title_only": title_only, "runs": runs, "scores": {}}
    baseline = json.loads(arguments.baseline.read_text()) if arguments.baseline else None
    for name, run in runs.items():
        named = {name: run} if baseline is None else {"before": baseline["runs"][name], name: run}
        compared = compare_runs(named, dataset.qrels, METRICS)
        result["scores"][name] = compared.scores[name]
        line = ", ".join(f"{metric} {compared.scores[name][metric]:.4f}" for metric in METRICS)
        if baseline is not None:
            before = ", ".join(f"{compared.scores['before'][m]:.4f}" for m in METRICS)
            p_values = ", ".join(f"{compared.p_values[name][m]:.4f}" for m in METRICS)
            line += f" (before {before}; paired t-test p {p_values})"
        print(f"{name}: {line}")
    print(f"{time.perf_counter() - started:.0f} s")
    arguments.out.write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()
