"""Fusion sweep on BEIR SciFact: which fusion, RRF k and weights for hybrid BM25 + dense retrieval.

The BM25 and dense lists come from the kit's own retrievers (``Indexes.bm25()``/``.dense()``, 100
documents each); every configuration fuses them with the kit's own fusion runnables, exactly as
``hybrid_retriever`` does (the script checks that, for RRF k=60, by running the real
``hybrid_retriever`` and comparing the runs). Metrics and paired t-tests come from ranx.

The sweep tunes on the test queries, so its best figure is optimistic. To show how much, it also
runs a 2-fold check: choose the configuration on half of the queries, score it on the other half.

    python benchmarks/eval_scifact.py                     # ../shared/data/scifact
    python benchmarks/eval_scifact.py --dataset DIR --cache-dir DIR --out results.md
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from langchain_core.documents import Document

from rag_fusion_chain.evaluate import (
    DEFAULT_CACHE_DIR,
    Comparison,
    Indexes,
    compare_runs,
    evaluate_run,
    hybrid_setup,
    load_beir,
    run_from_rankings,
    run_setups,
)
from rag_fusion_chain.evaluate.metrics import Run
from rag_fusion_chain.fusion import (
    BaseFusion,
    DistBasedScoreFusion,
    RankedList,
    ReciprocalRankFusion,
    RelativeScoreFusion,
)

REPOSITORY = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = REPOSITORY.parent / "shared" / "data" / "scifact"
DEFAULT_OUT = REPOSITORY / "benchmarks" / "results" / "scifact_sweep.md"
DEPTH = 100
RRF_KS = (10, 30, 60, 100)
DENSE_WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7)
BASELINE = "rrf k=60"
METRICS = ("ndcg@10", "recall@100", "mrr@10", "map")


def configurations() -> dict[str, BaseFusion]:
    """Every fusion to try, by label; weights are (bm25, dense) with dense + bm25 = 1."""
    configs: dict[str, BaseFusion] = {}
    for k in RRF_KS:
        configs[f"rrf k={k}"] = ReciprocalRankFusion(k=k, top_n=DEPTH)
    for dense in DENSE_WEIGHTS:
        weights = [round(1 - dense, 2), dense]
        configs[f"rrf k=60 dense={dense}"] = ReciprocalRankFusion(
            k=60, weights=weights, top_n=DEPTH
        )
        configs[f"relative dense={dense}"] = RelativeScoreFusion(weights=weights, top_n=DEPTH)
        configs[f"dist dense={dense}"] = DistBasedScoreFusion(weights=weights, top_n=DEPTH)
    return configs


def fused_run(
    fusion: BaseFusion,
    query_ids: Sequence[str],
    bm25_lists: Sequence[list[Document]],
    dense_lists: Sequence[list[Document]],
) -> Run:
    """Fuse each query's (bm25, dense) lists with ``fusion`` and turn the result into a run."""
    rankings = {
        query_id: fusion.invoke([RankedList(bm25), RankedList(dense)])
        for query_id, bm25, dense in zip(query_ids, bm25_lists, dense_lists, strict=True)
    }
    return run_from_rankings(rankings)


def two_fold_check(runs: dict[str, Run], qrels: dict[str, dict[str, int]]) -> list[list[str]]:
    """Pick the best configuration by nDCG@10 on one half of the queries, score it on the other."""
    even, odd = halves(qrels)
    rows = []
    for fold, (tune_qrels, held_qrels) in enumerate([(even, odd), (odd, even)], 1):
        tuned = {
            name: evaluate_run(run, tune_qrels, ["ndcg@10"])["ndcg@10"]
            for name, run in runs.items()
        }
        best = max(tuned, key=tuned.__getitem__)
        held = {name: evaluate_run(runs[name], held_qrels, ["ndcg@10"])["ndcg@10"] for name in runs}
        oracle = max(held, key=held.__getitem__)
        rows.append(
            [
                str(fold),
                best,
                f"{tuned[best]:.4f}",
                f"{held[best]:.4f}",
                f"{held[BASELINE]:.4f}",
                f"{oracle} ({held[oracle]:.4f})",
            ]
        )
    return rows


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def halves(qrels: dict[str, dict[str, int]]) -> list[dict[str, dict[str, int]]]:
    """The judged queries split by position: even positions, odd positions."""
    query_ids = list(qrels)
    return [{query_id: qrels[query_id] for query_id in query_ids[start::2]} for start in (0, 1)]


def sweep_rows(
    comparison: Comparison, runs: dict[str, Run], qrels: dict[str, dict[str, int]]
) -> list[list[str]]:
    """One row per configuration, best nDCG@10 first: metrics, p-value, nDCG@10 on each half."""
    order = sorted(comparison.scores, key=lambda name: -comparison.scores[name]["ndcg@10"])
    split = halves(qrels)
    rows = []
    for name in order:
        per_half = [evaluate_run(runs[name], half, ["ndcg@10"])["ndcg@10"] for half in split]
        scores = comparison.scores[name]
        p_values = comparison.p_values.get(name, {})
        rows.append(
            [
                name,
                *(
                    f"{scores[metric]:.4f}"
                    + ("*" if comparison.is_significant(name, metric) else "")
                    for metric in METRICS
                ),
                "-" if name == comparison.baseline else f"{p_values['ndcg@10']:.4f}",
                *(f"{value:.4f}" for value in per_half),
            ]
        )
    return rows


def main(argv: Sequence[str] | None = None) -> Comparison:
    """Run the sweep, print its tables, write the markdown report; return the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    arguments = parser.parse_args(argv)

    started = time.perf_counter()
    dataset = load_beir(arguments.dataset)
    indexes = Indexes(dataset.corpus, cache_dir=arguments.cache_dir, depth=DEPTH)
    query_ids = list(dataset.queries)
    texts = [dataset.queries[query_id] for query_id in query_ids]
    bm25_lists = indexes.bm25().batch(texts)
    dense_lists = indexes.dense().batch(texts)
    runs: dict[str, Run] = {
        "bm25": run_from_rankings(dict(zip(query_ids, bm25_lists, strict=True))),
        "dense": run_from_rankings(dict(zip(query_ids, dense_lists, strict=True))),
    }
    for label, fusion in configurations().items():
        runs[label] = fused_run(fusion, query_ids, bm25_lists, dense_lists)

    kit_runs = run_setups(
        dataset, [hybrid_setup("rrf", rrf_k=60), hybrid_setup("dist", weights=(0.5, 0.5))], indexes
    )
    same_as_kit = (
        kit_runs["hybrid-rrf"] == runs[BASELINE]
        and kit_runs["hybrid-dist"] == runs["dist dense=0.5"]
    )

    ordered = {
        BASELINE: runs[BASELINE],
        **{name: run for name, run in runs.items() if name != BASELINE},
    }
    comparison = compare_runs(ordered, dataset.qrels, METRICS, stat_test="student", max_p=0.05)
    fused = {name: run for name, run in runs.items() if name not in ("bm25", "dense")}
    rrf_only = {f"rrf k={k}": runs[f"rrf k={k}"] for k in RRF_KS}
    folds = [
        [family, *row]
        for family, family_runs in (("all fusions", fused), ("RRF k only", rrf_only))
        for row in two_fold_check(family_runs, dataset.qrels)
    ]
    elapsed = time.perf_counter() - started

    headers = ["configuration", *METRICS, "p ndcg@10", "ndcg@10 even", "ndcg@10 odd"]
    rows = sweep_rows(comparison, runs, dataset.qrels)
    fold_headers = [
        "candidates",
        "fold",
        "chosen on half A",
        "nDCG@10 half A",
        "nDCG@10 half B",
        f"{BASELINE} half B",
        "best on half B (oracle)",
    ]
    report = REPORT.format(
        queries=len(query_ids),
        documents=len(dataset.corpus),
        sweep=markdown_table(headers, rows),
        folds=markdown_table(fold_headers, folds),
        same_as_kit="identical" if same_as_kit else "DIFFERENT (investigate)",
        elapsed=f"{elapsed:.0f}",
    )
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(report, encoding="utf-8")
    print(markdown_table(headers, rows))
    print()
    print(markdown_table(fold_headers, folds))
    print(f"\nhybrid_retriever vs sweep path: {'identical' if same_as_kit else 'DIFFERENT'}")
    print(f"wrote {arguments.out} in {elapsed:.0f} s")
    return comparison


REPORT = """# Fusion sweep on BEIR SciFact (test split)

Produced by `python benchmarks/eval_scifact.py` ({queries} queries, {documents} documents, {elapsed} s).
BM25: the kit's `BM25Retriever` (bm25s, English Snowball stemmer and stopwords, title + text).
Dense: the kit's `VectorRetriever` over `build_faiss` with all-MiniLM-L6-v2 (`models.embeddings()`,
normalised, cosine). Top {depth} per list; fused lists cut to {depth}. Metrics and paired two-sided
t-tests from ranx; `*` marks p < 0.05 against `{baseline}`; the p column is for nDCG@10.
Weights are `(bm25, dense)` with `dense` as given and `bm25 = 1 - dense`.

The fused runs apply the kit's fusion runnables to the two retrievers' lists. The real
`hybrid_retriever` gives runs **{same_as_kit}** to the sweep's `{baseline}` and `dist dense=0.5`.

## All configurations (best nDCG@10 first)

{sweep}

## Over-fitting check: 2-fold selection

**Caution: every figure above is measured on the test queries that the choice is made on**, so the
best row is an optimistic estimate: with 300 queries, neighbouring configurations differ by a few
thousandths, less than the same configuration differs between the two halves of the queries (see the
`even`/`odd` columns). To estimate the optimism, the configuration is chosen on half of the queries
(even / odd positions) and scored on the other half:

{folds}

Fold 1 chooses on the even positions (half A) and scores on the odd ones (half B); fold 2 the
other way round.

## Decision (the defaults in `rag_fusion_chain/evaluate/setups.py`)

* **Hybrid fusion: distribution-based score fusion (`dist`, mean ± 3σ bounds), equal weights.**
  At equal weights, both score-based fusions (`relative`, `dist`) beat every RRF k on both halves;
  `dist dense=0.5` is significantly better than RRF k=60 (paired t-test on 300 queries), and
  choosing among all fusions on one half always picks a `dist` configuration, which then scores
  about 0.015 above RRF k=60 on the held-out half.
* **Weights stay equal (0.5 / 0.5).** `dense=0.4` is ahead by ~0.003 on all queries, but the
  2-fold selection alternates between 0.4 and 0.5: the data do not support a weight other than the
  untuned one. Weights from 0.3 to 0.6 are within ~0.01; 0.7 (dense-heavy) is clearly worse.
* **RRF k = 30 for `hybrid-rrf`** (kit-wide default stays 60). k=10 and k=30 beat k=60 and k=100
  on both halves (k=30 vs k=60: p ≈ 0.03); which of 10 and 30 is better flips between halves, so
  the less extreme value is taken. The gain is small (+0.004 nDCG@10).

All of this is tuned on the SciFact **test** queries (BEIR ships no separate SciFact dev split with
this data), with one embedding model and one corpus: treat the margins between neighbouring
configurations as noise and re-check on your own data (`rag-fusion eval`) before relying on them.
"""

REPORT = REPORT.replace("{depth}", str(DEPTH)).replace("{baseline}", BASELINE)


if __name__ == "__main__":
    main()
