"""Hybrid sweep on BEIR SciFact, every choice tuned by cross-validation over the test queries.

The grid: BM25 parameters (k1, b), candidate depth per retriever, fusion (RRF rank_constant,
relative and distribution-based score fusion) and the dense weight. Lists come from the kit's own
retrievers (``BM25Retriever``, ``VectorRetriever`` over FAISS with the default embeddings, cached on
disk so the corpus is embedded once per backend) and are fused by the kit's own fusion runnables, as
``hybrid_retriever`` does. Whole abstracts are indexed, so no chunk-to-document aggregation is
involved.

Selection is never scored on the queries it was made on: for each split of the queries into two
halves, the configuration with the best mean nDCG@10 on one half is scored on the other, both ways;
the report gives the mean held-out nDCG@10 over the even/odd split and over ``--repeats`` random
halvings, with its spread, and which configurations were chosen how often.

    python benchmarks/eval_scifact.py                     # ../shared/data/scifact
    python benchmarks/eval_scifact.py --dataset DIR --cache-dir DIR --out results.md
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from langchain_core.documents import Document

from rag_fusion_chain.evaluate import (
    DEFAULT_CACHE_DIR,
    Indexes,
    compare_runs,
    evaluate_run,
    load_beir,
    run_from_rankings,
)
from rag_fusion_chain.evaluate.metrics import Run, per_query_scores
from rag_fusion_chain.fusion import (
    BaseFusion,
    DistBasedScoreFusion,
    RankedList,
    ReciprocalRankFusion,
    RelativeScoreFusion,
)
from rag_fusion_chain.retrievers.bm25 import BM25Retriever

REPOSITORY = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = REPOSITORY.parent / "shared" / "data" / "scifact"
DEFAULT_OUT = REPOSITORY / "benchmarks" / "results" / "scifact_sweep.md"
KEEP = 100
"""Fused lists are cut to 100 documents (Recall@100)."""
BM25_PARAMETERS = ((1.5, 0.75), (1.2, 0.75), (0.9, 0.4))
"""(k1, b): the kit's default, the textbook values, Anserini's defaults."""
DEPTHS = (100, 200)
RANK_CONSTANTS = (10, 30, 60)
DENSE_WEIGHTS = (0.3, 0.4, 0.5, 0.6)
BASELINE = "k1=1.5 b=0.75, depth=100, dist dense=0.5"
"""The kit's default hybrid before this sweep."""
METRIC = "ndcg@10"


def fusions() -> dict[str, BaseFusion]:
    """Every fusion to try, by label; weights are (bm25, dense) with bm25 = 1 - dense."""
    configs: dict[str, BaseFusion] = {
        f"rrf rank_constant={constant}": ReciprocalRankFusion(rank_constant=constant, top_n=KEEP)
        for constant in RANK_CONSTANTS
    }
    for dense in DENSE_WEIGHTS:
        weights = [round(1 - dense, 2), dense]
        configs[f"relative dense={dense}"] = RelativeScoreFusion(weights=weights, top_n=KEEP)
        configs[f"dist dense={dense}"] = DistBasedScoreFusion(weights=weights, top_n=KEEP)
    return configs


def fused_run(
    fusion: BaseFusion,
    query_ids: Sequence[str],
    bm25_lists: Sequence[list[Document]],
    dense_lists: Sequence[list[Document]],
    depth: int,
) -> Run:
    """Fuse each query's top-``depth`` (bm25, dense) lists and turn the result into a run."""
    rankings = {
        query_id: fusion.invoke([RankedList(bm25[:depth]), RankedList(dense[:depth])])
        for query_id, bm25, dense in zip(query_ids, bm25_lists, dense_lists, strict=True)
    }
    return run_from_rankings(rankings)


def halvings(query_ids: Sequence[str], repeats: int, seed: int = 15) -> list[tuple[str, set[str]]]:
    """The even/odd split, then ``repeats`` random halvings; each is one half (the other is the rest)."""
    splits = [("even/odd", set(query_ids[0::2]))]
    generator = random.Random(seed)
    for repeat in range(repeats):
        shuffled = list(query_ids)
        generator.shuffle(shuffled)
        splits.append((f"random {repeat + 1}", set(shuffled[: len(shuffled) // 2])))
    return splits


def mean_over(scores: Mapping[str, float], queries: set[str]) -> float:
    return statistics.fmean(scores[query] for query in queries)


def cross_validate(
    per_query: Mapping[str, Mapping[str, float]],
    query_ids: Sequence[str],
    repeats: int,
    baseline: str = BASELINE,
) -> tuple[list[list[str]], list[float], Counter[str]]:
    """Choose on one half, score on the other, both ways, for every split (ties go to the
    configuration listed first).

    Returns table rows (one per split), the held-out score of every (split, direction), and how
    often each configuration was chosen.
    """
    rows, held_out, chosen = [], [], Counter[str]()
    everything = set(query_ids)
    for label, half in halvings(query_ids, repeats):
        other = everything - half
        scores = []
        for tune, test in ((half, other), (other, half)):
            best = max(per_query, key=lambda name, tune=tune: mean_over(per_query[name], tune))
            chosen[best] += 1
            scores.append(mean_over(per_query[best], test))
            rows.append(
                [
                    label,
                    best,
                    f"{mean_over(per_query[best], tune):.4f}",
                    f"{scores[-1]:.4f}",
                    f"{mean_over(per_query[baseline], test):.4f}",
                ]
            )
        held_out.extend(scores)
    return rows, held_out, chosen


def held_out_summary(rows: Sequence[Sequence[str]], held_out: Sequence[float]) -> dict[str, float]:
    """Mean, spread and range of the held-out scores, and their gain over the baseline on the
    same halves (both as the rows print them, so choosing the baseline gains exactly 0)."""
    gains = [float(row[-2]) - float(row[-1]) for row in rows]
    return {
        "gain_mean": statistics.fmean(gains),
        "gain_sd": statistics.stdev(gains) if len(gains) > 1 else 0.0,
        "wins": sum(gain > 0 for gain in gains),
        "losses": sum(gain < 0 for gain in gains),
        "held_out_mean": statistics.fmean(held_out),
        "held_out_sd": statistics.stdev(held_out) if len(held_out) > 1 else 0.0,
        "held_out_min": min(held_out),
        "held_out_max": max(held_out),
        "baseline_mean": statistics.fmean(float(row[-1]) for row in rows),
        "even_odd_mean": statistics.fmean(held_out[:2]),
    }


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Run the sweep and its cross-validation, write the report; return the held-out summary."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--embedding", default=None, help="models.embeddings name (default minilm)")
    parser.add_argument("--repeats", type=int, default=20, help="random halvings besides even/odd")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    arguments = parser.parse_args(argv)

    started = time.perf_counter()
    dataset = load_beir(arguments.dataset)
    depth = max(DEPTHS)
    indexes = Indexes(dataset.corpus, arguments.embedding, arguments.cache_dir, depth=depth)
    query_ids = list(dataset.queries)
    texts = [dataset.queries[query_id] for query_id in query_ids]
    dense_lists = indexes.dense().batch(texts)
    runs: dict[str, Run] = {
        "dense": run_from_rankings(dict(zip(query_ids, dense_lists, strict=True)))
    }
    for k1, b in BM25_PARAMETERS:
        bm25 = BM25Retriever.from_documents(dataset.corpus, k=depth, k1=k1, b=b)
        bm25_lists = bm25.batch(texts)
        prefix = f"k1={k1} b={b}"
        runs[f"{prefix}, bm25"] = run_from_rankings(
            dict(zip(query_ids, [ranking[:KEEP] for ranking in bm25_lists], strict=True))
        )
        for list_depth, (label, fusion) in itertools.product(DEPTHS, fusions().items()):
            name = f"{prefix}, depth={list_depth}, {label}"
            runs[name] = fused_run(fusion, query_ids, bm25_lists, dense_lists, list_depth)

    per_query = {name: per_query_scores(run, dataset.qrels, METRIC) for name, run in runs.items()}
    hybrids = {name: scores for name, scores in per_query.items() if "depth=" in name}
    rows, held_out, chosen = cross_validate(hybrids, query_ids, arguments.repeats)
    summary = held_out_summary(rows, held_out)
    ranked = sorted(runs, key=lambda name: -statistics.fmean(per_query[name].values()))
    top = [name for name in ranked if name != BASELINE][:12]
    compared = compare_runs(
        {BASELINE: runs[BASELINE], **{name: runs[name] for name in top}},
        dataset.qrels,
        [METRIC, "recall@100"],
    )
    grid_rows = [
        [
            name,
            f"{compared.scores[name][METRIC]:.4f}",
            f"{compared.scores[name]['recall@100']:.4f}",
            "-" if name == BASELINE else f"{compared.p_values[name][METRIC]:.4f}",
            str(chosen.get(name, 0)),
        ]
        for name in [BASELINE, *top]
    ]
    singles = [
        [name, f"{evaluate_run(runs[name], dataset.qrels, [METRIC])[METRIC]:.4f}"]
        for name in runs
        if "depth=" not in name
    ]
    report = REPORT.format(
        queries=len(query_ids),
        documents=len(dataset.corpus),
        configurations=len(hybrids),
        splits=1 + arguments.repeats,
        repeats=arguments.repeats,
        grid=markdown_table(
            ["configuration", METRIC, "recall@100", "p vs baseline", "times chosen"], grid_rows
        ),
        singles=markdown_table(["run", METRIC], singles),
        folds=markdown_table(
            ["split", "chosen on half A", "half A", "held-out half B", "baseline on half B"], rows
        ),
        chosen=", ".join(f"{name} ({count})" for name, count in chosen.most_common()),
        elapsed=f"{time.perf_counter() - started:.0f}",
        **{key: f"{value:.4f}" for key, value in summary.items()},
    )
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(report, encoding="utf-8")
    print(report)
    return summary


REPORT = """# Hybrid sweep on BEIR SciFact (test split), cross-validated

Produced by `python benchmarks/eval_scifact.py` ({queries} queries, {documents} documents,
{configurations} hybrid configurations, {elapsed} s). Baseline: `{baseline}` (the kit's default
hybrid before the sweep). nDCG@10 and paired t-tests from ranx.

## Cross-validated estimate (what to quote)

Choosing the configuration on one half of the queries and scoring it on the other, both ways, over
the even/odd split and {repeats} random halvings ({splits} splits, 2 directions each):
**held-out nDCG@10 {held_out_mean} ± {held_out_sd}** (sd over the held-out halves; min {held_out_min},
max {held_out_max}); even/odd alone: {even_odd_mean}. Gain of the selection over the baseline on
the same held-out halves: {gain_mean} ± {gain_sd}.

Chosen (times): {chosen}.

## Best configurations on all queries (optimistic: chosen on the queries they are scored on)

{grid}

Single retrievers:

{singles}

## Every split

{folds}
"""

REPORT = REPORT.replace("{baseline}", BASELINE)


if __name__ == "__main__":
    main()
