"""Offline RAG-Fusion's query settings on BEIR SciFact, chosen by cross-validation over the test queries.

The candidates (:func:`candidates`): the current settings (``offline.feedback_queries`` draws its
phrases from the ``2 * n * TERMS_PER_QUERY`` strongest feedback terms, 24 at the strategy's n = 4;
48 before this check), the 12, 24, 36 or 48 strongest terms, and the idf of the feedback terms over
the whole collection instead of over the question's fused ranking (not adoptable as it is: the
offline query steps read only the documents a retriever returned, no index). Each is set by
patching :mod:`offline` in this process (the package is unchanged) and run through the kit's own
``rag-fusion-offline`` setup (question plus 4 feedback queries, BM25 and dense each, RRF), as
``rag-fusion eval`` runs it; per-query nDCG@10 from ranx.

Selection is then scored as ``eval_scifact.py`` scores it: for the even/odd split and ``--repeats``
random halvings, the candidate with the best mean nDCG@10 on one half (``--baseline`` on a tie) is
scored on the other, both ways, against ``--baseline`` on the same half. Two pools: the adoptable
candidates (the baseline and the term counts), and those with the collection idf.

    nice python benchmarks/eval_offline_queries.py --baseline "48 terms"  # the check that set 24
    python benchmarks/eval_offline_queries.py --dataset DIR --cache-dir DIR --out results.md
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from unittest import mock

from langchain_core.documents import Document

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_scifact import (  # noqa: E402
    DEFAULT_DATASET,
    METRIC,
    REPOSITORY,
    cross_validate,
    held_out_summary,
    markdown_table,
)

from rag_fusion_chain import offline  # noqa: E402
from rag_fusion_chain.evaluate import DEFAULT_CACHE_DIR, Indexes, compare_runs, load_beir  # noqa: E402
from rag_fusion_chain.evaluate.metrics import Run, per_query_scores  # noqa: E402
from rag_fusion_chain.evaluate.setups import run_setups, setup_by_name  # noqa: E402

DEFAULT_OUT = REPOSITORY / "benchmarks" / "results" / "scifact_offline_cv.md"
SETUP = "rag-fusion-offline"
CURRENT = "current settings"
TERM_COUNTS = (12, 24, 36, 48)
COLLECTION_IDF = "collection idf"
REFERENCES = ("bm25", "hybrid")
"""Run beside the candidates for scale (the kit's default hybrid), never chosen."""


@contextlib.contextmanager
def strongest_terms(count: int) -> Iterator[None]:
    """Feedback phrases drawn from the ``count`` strongest terms, whatever n asks for."""
    original = offline._feedback_phrases

    def pooled(question: str, documents: Sequence[Document], _: int) -> list[str]:
        return original(question, documents, count)

    with mock.patch.object(offline, "_feedback_phrases", pooled):
        yield


@contextlib.contextmanager
def collection_idf(corpus: Sequence[Document]) -> Iterator[None]:
    """The feedback terms' idf over ``corpus`` (its document frequencies and size) instead of
    over the documents the question retrieved."""
    frequency, original = offline._document_frequency(corpus), offline._feedback_phrases

    class CountedAsCorpus(list[Document]):
        """The retrieved documents, but as many as the corpus to the idf's ``len``."""

        def __len__(self) -> int:
            return len(corpus)

    def over_corpus(question: str, documents: Sequence[Document], count: int) -> list[str]:
        return original(question, CountedAsCorpus(documents), count)

    with (
        mock.patch.object(offline, "_document_frequency", lambda documents: frequency),
        mock.patch.object(offline, "_feedback_phrases", over_corpus),
    ):
        yield


def candidates(
    corpus: Sequence[Document],
) -> dict[str, Callable[[], contextlib.AbstractContextManager[None]]]:
    """Each candidate's patch by label."""
    return {
        CURRENT: contextlib.nullcontext,
        **{f"{count} terms": functools.partial(strongest_terms, count) for count in TERM_COUNTS},
        COLLECTION_IDF: functools.partial(collection_idf, corpus),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """Run every candidate, cross-validate the choice, write the report; return both pools'
    held-out summaries."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--embedding", default="minilm-f32", help="models.embeddings name")
    parser.add_argument("--repeats", type=int, default=20, help="random halvings besides even/odd")
    parser.add_argument(
        "--baseline",
        default=CURRENT,
        choices=[name for name in candidates(()) if name != COLLECTION_IDF],
        help="the candidate to beat (it wins ties)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    arguments = parser.parse_args(argv)

    started = time.perf_counter()
    dataset = load_beir(arguments.dataset)
    indexes = Indexes(dataset.corpus, arguments.embedding, arguments.cache_dir)
    query_ids = list(dataset.queries)
    runs: dict[str, Run] = run_setups(
        dataset, [setup_by_name(name) for name in REFERENCES], indexes
    )
    minutes: dict[str, str] = {}
    for label, patch in candidates(dataset.corpus).items():
        began = time.perf_counter()
        with patch():
            runs |= {label: run_setups(dataset, [setup_by_name(SETUP)], indexes)[SETUP]}
        minutes[label] = f"{(time.perf_counter() - began) / 60:.1f}"
        print(f"{label}: {minutes[label]} min", file=sys.stderr)

    per_query = {name: per_query_scores(run, dataset.qrels, METRIC) for name, run in runs.items()}
    baseline = arguments.baseline
    terms = [f"{count} terms" for count in TERM_COUNTS if f"{count} terms" != baseline]
    pools = {"adoptable": [baseline, *terms], "all": [baseline, *terms, COLLECTION_IDF]}
    summaries, sections = {}, []
    for pool, names in pools.items():
        scores = {name: per_query[name] for name in names}
        rows, held_out, chosen = cross_validate(scores, query_ids, arguments.repeats, baseline)
        summaries[pool] = summary = held_out_summary(rows, held_out)
        sections.append(
            SECTION.format(
                pool=pool,
                names=", ".join(names),
                directions=len(rows),
                chosen=", ".join(f"{name} ({count})" for name, count in chosen.most_common()),
                folds=markdown_table(
                    [
                        "split",
                        "chosen on half A",
                        "half A",
                        "held-out half B",
                        "baseline on half B",
                    ],
                    rows,
                ),
                **{key: f"{value:.4f}" for key, value in summary.items()}
                | {key: f"{summary[key]:.0f}" for key in ("wins", "losses")},
            )
        )
    order = [baseline, *(name for name in minutes if name != baseline), *REFERENCES]
    compared = compare_runs(
        {name: runs[name] for name in order}, dataset.qrels, [METRIC, "recall@100"]
    )
    table = [
        [
            name,
            f"{compared.scores[name][METRIC]:.4f}",
            f"{compared.scores[name]['recall@100']:.4f}",
            "-" if name == baseline else f"{compared.p_values[name][METRIC]:.4f}",
            minutes.get(name, "-"),
        ]
        for name in order
    ]
    report = REPORT.format(
        queries=len(query_ids),
        documents=len(dataset.corpus),
        embedding=arguments.embedding,
        splits=1 + arguments.repeats,
        repeats=arguments.repeats,
        elapsed=f"{time.perf_counter() - started:.0f}",
        baseline=baseline,
        table=markdown_table(
            ["run", METRIC, "recall@100", f"p {METRIC} vs baseline", "minutes"], table
        ),
        sections="\n".join(sections),
    )
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(report, encoding="utf-8")
    print(report)
    return summaries


REPORT = """# Offline RAG-Fusion query settings on BEIR SciFact (test split), cross-validated

Produced by `python benchmarks/eval_offline_queries.py --baseline "{baseline}"` ({queries} queries,
{documents} documents, embeddings `{embedding}`, {elapsed} s). Each candidate is `rag-fusion-offline`
with one setting of `offline.feedback_queries` patched in the process (the collection idf at the
current number of terms); nDCG@10 and paired t-tests from ranx.

## On all queries (optimistic: any choice among these is made on the queries it is scored on)

{table}

## Cross-validated choice

Choosing the candidate on one half of the queries and scoring it on the other, both ways, over the
even/odd split and {repeats} random halvings ({splits} splits, 2 directions each).
{sections}"""

SECTION = """
### Pool: {pool} ({names})

**held-out nDCG@10 {held_out_mean} ± {held_out_sd}** (sd over the held-out halves; min
{held_out_min}, max {held_out_max}; even/odd alone {even_odd_mean}); the baseline on the same
halves: {baseline_mean}. Gain of the choice: {gain_mean} ± {gain_sd}; better than the baseline in
{wins} of {directions} held-out halves, worse in {losses}.

Chosen (times): {chosen}.

{folds}
"""


if __name__ == "__main__":
    main()
