"""Retrieval metrics and paired significance tests, computed by ranx (never by hand here).

A *run* is ``{query_id: {document_id: score}}`` (higher is better); qrels are
``{query_id: {document_id: relevance}}``. Both are plain dicts, so the functions work on any system's
output, not only the kit's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from langchain_core.documents import Document

from rag_fusion_chain.fusion import document_id

Run = dict[str, dict[str, float]]
"""A ranking per query: ``{query_id: {document_id: score}}``."""

DEFAULT_METRICS: tuple[str, ...] = ("ndcg@10", "recall@100", "mrr@10", "map")
"""The metrics reported by default, in ranx's names."""

STAT_TESTS = ("student", "fisher")
"""ranx's paired tests: two-sided paired Student's t-test, Fisher's randomisation test."""


def _ranx():  # type: ignore[no-untyped-def]
    """ranx, with the homes that its imports write to (ir_datasets, matplotlib) in the kit's cache.

    Importing ranx imports ir_datasets, which makes 18 folders under ``~/.ir_datasets``, and
    matplotlib, which writes a font list under ``~/.cache/matplotlib``; their documented
    ``IR_DATASETS_HOME`` and ``MPLCONFIGDIR`` move them, unless the user has set them.
    """
    from rag_fusion_chain.evaluate.cache import DEFAULT_CACHE_DIR

    os.environ.setdefault("IR_DATASETS_HOME", str(DEFAULT_CACHE_DIR.parent / "ir_datasets"))
    os.environ.setdefault("MPLCONFIGDIR", str(DEFAULT_CACHE_DIR.parent / "matplotlib"))
    try:
        import ranx
    except ImportError as error:
        raise ImportError('evaluation needs ranx: pip install "rag-fusion-chain[eval]"') from error
    return ranx


def run_from_rankings(rankings: Mapping[str, Sequence[Document]]) -> Run:
    """Turn ranked Documents per query into a run, scoring by rank so ranx keeps the kit's order.

    The score is ``len(list) - position``: ranx re-sorts by score and would break ties its own way,
    so the kit's own scores (and tie-breaking) are not passed on. Duplicates keep their best rank.

    >>> run_from_rankings({"q1": [Document("a", id="d1"), Document("b", id="d2")]})
    {'q1': {'d1': 2.0, 'd2': 1.0}}
    """
    run: Run = {}
    for query_id, documents in rankings.items():
        scores: dict[str, float] = {}
        for position, document in enumerate(documents):
            scores.setdefault(document_id(document), float(len(documents) - position))
        run[query_id] = scores
    return run


def _ranx_inputs(
    run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]], name: str
):  # type: ignore[no-untyped-def]
    """Build ranx Qrels and Run; queries with no results are left out (make_comparable scores 0)."""
    ranx = _ranx()
    if not qrels:
        raise ValueError("qrels must judge at least one query")
    ranx_qrels = ranx.Qrels.from_dict({query: dict(judged) for query, judged in qrels.items()})
    answered = {query: dict(scores) for query, scores in run.items() if scores and query in qrels}
    if not answered:  # ranx cannot hold an empty run; a run answering nothing scores 0 everywhere
        return ranx_qrels, None
    return ranx_qrels, ranx.Run.from_dict(answered, name=name)


def evaluate_run(
    run: Mapping[str, Mapping[str, float]],
    qrels: Mapping[str, Mapping[str, int]],
    metrics: Sequence[str] = DEFAULT_METRICS,
) -> dict[str, float]:
    """Mean of each metric over the judged queries (unanswered queries count as 0).

    >>> evaluate_run({"q1": {"d1": 2.0, "d2": 1.0}}, {"q1": {"d2": 1}}, ["mrr@10"])
    {'mrr@10': 0.5}
    """
    ranx_qrels, ranx_run = _ranx_inputs(run, qrels, "run")
    if ranx_run is None:
        return {metric: 0.0 for metric in metrics}
    scores = _ranx().evaluate(ranx_qrels, ranx_run, list(metrics), make_comparable=True)
    if len(metrics) == 1:  # ranx returns a bare number for a single metric
        return {metrics[0]: float(scores)}
    return {metric: float(scores[metric]) for metric in metrics}


def per_query_scores(
    run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]], metric: str
) -> dict[str, float]:
    """Each judged query's ``metric`` (0 when unanswered), for cross-validation over query subsets.

    >>> per_query_scores({"q1": {"d1": 2.0, "d2": 1.0}}, {"q1": {"d2": 1}, "q2": {"d1": 1}}, "mrr@10")
    {'q1': 0.5, 'q2': 0.0}
    """
    ranx_qrels, ranx_run = _ranx_inputs(run, qrels, "run")
    if ranx_run is None:
        return {query: 0.0 for query in qrels}
    _ranx().evaluate(ranx_qrels, ranx_run, metric, make_comparable=True)
    scores = ranx_run.scores[metric]
    return {query: float(scores.get(query, 0.0)) for query in qrels}


def _p_value(value: float) -> float:
    """ranx's p-value, with NaN (per-query scores identical to the baseline's) read as 1.0."""
    return 1.0 if math.isnan(value) else float(value)


@dataclass(frozen=True)
class Comparison:
    """Mean scores of several runs and paired p-values of each against the first (the baseline)."""

    scores: dict[str, dict[str, float]]
    """``{run_name: {metric: mean}}`` in the order the runs were given."""
    p_values: dict[str, dict[str, float]]
    """``{run_name: {metric: p}}`` against the baseline; empty for the baseline itself."""
    baseline: str
    stat_test: str
    max_p: float

    def is_significant(self, run_name: str, metric: str) -> bool:
        """Whether the run differs from the baseline on the metric at ``p < max_p``."""
        p_value = self.p_values.get(run_name, {}).get(metric)
        return p_value is not None and p_value < self.max_p


def compare_runs(
    runs: Mapping[str, Mapping[str, Mapping[str, float]]],
    qrels: Mapping[str, Mapping[str, int]],
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    stat_test: str = "student",
    max_p: float = 0.05,
    permutations: int = 1000,
    random_seed: int = 42,
) -> Comparison:
    """Evaluate named runs with ranx.compare; p-values compare each run with the first one.

    ``stat_test`` is ``"student"`` (paired t-test) or ``"fisher"`` (randomisation test with
    ``permutations`` permutations). A run whose per-query scores equal the baseline's gets
    p = 1.0. Every run must answer at least one judged query.

    >>> qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}}
    >>> runs = {"a": {"q1": {"d1": 1.0}, "q2": {"d2": 1.0}}, "b": {"q1": {"d1": 1.0}}}
    >>> comparison = compare_runs(runs, qrels, ["mrr@10"])
    >>> comparison.scores["b"], comparison.baseline
    ({'mrr@10': 0.5}, 'a')
    """
    if stat_test not in STAT_TESTS:
        raise ValueError(f"stat_test must be one of {STAT_TESTS}, got {stat_test!r}")
    if not runs:
        raise ValueError("runs must hold at least one named run")
    names = list(runs)
    if len(names) == 1:
        only = names[0]
        return Comparison(
            {only: evaluate_run(runs[only], qrels, metrics)}, {only: {}}, only, stat_test, max_p
        )
    ranx_runs = []
    ranx_qrels = None
    for name in names:
        ranx_qrels, ranx_run = _ranx_inputs(runs[name], qrels, name)
        if ranx_run is None:
            raise ValueError(f"runs[{name!r}] answers none of the judged queries")
        ranx_runs.append(ranx_run)
    report = (
        _ranx()
        .compare(
            ranx_qrels,
            ranx_runs,
            list(metrics),
            stat_test=stat_test,
            n_permutations=permutations,
            max_p=max_p,
            random_seed=random_seed,
            make_comparable=True,
        )
        .to_dict()
    )
    baseline = names[0]
    return Comparison(
        scores={
            name: {metric: float(report[name]["scores"][metric]) for metric in metrics}
            for name in names
        },
        p_values={
            name: (
                {}
                if name == baseline
                else {
                    metric: _p_value(report[baseline]["comparisons"][name][metric])
                    for metric in metrics
                }
            )
            for name in names
        },
        baseline=baseline,
        stat_test=stat_test,
        max_p=max_p,
    )
