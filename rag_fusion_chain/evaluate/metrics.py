"""Retrieval metrics and paired significance tests, computed by ranx, over plain dicts (a run
``{query_id: {document_id: score}}``, higher is better; qrels ``{query_id: {document_id: grade}}``)."""

from __future__ import annotations

import math
import os
import statistics
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import Document

from rag_fusion_chain.fusion import document_id
from rag_fusion_chain.validation import KIT_CACHE, require_extra

Run = dict[str, dict[str, float]]
Judgements = Mapping[str, Mapping[str, int]]

DEFAULT_METRICS: tuple[str, ...] = ("ndcg@10", "recall@100", "mrr@10", "map")  # ranx's names
STAT_TESTS = ("student", "fisher")
"""ranx's paired tests: two-sided paired Student's t-test, Fisher's randomisation test."""


def eval_library(module: str) -> Any:
    """``module`` of the eval extra (ranx, matplotlib), writing in the kit's cache unless the user
    set ``IR_DATASETS_HOME`` / ``MPLCONFIGDIR``: nothing new in ``~/.config`` or ``~``."""
    os.environ.setdefault("IR_DATASETS_HOME", str(KIT_CACHE / "ir_datasets"))
    os.environ.setdefault("MPLCONFIGDIR", str(KIT_CACHE / "matplotlib"))
    # ranx's prange loops index with uint64: numba flags that harmless cast as it compiles them
    warnings.filterwarnings("ignore", "unsafe cast from uint64", module=r".*[\\/]ranx[\\/]")
    return require_extra(module, "eval")


def ranking_scores(identifiers: Sequence[str]) -> dict[str, float]:
    """Rank-derived scores ``len - position`` (a repeat keeps its best rank), so that ranx keeps
    the kit's order and tie-breaking."""
    scores: dict[str, float] = {}
    for position, identifier in enumerate(identifiers):
        scores.setdefault(str(identifier), float(len(identifiers) - position))
    return scores


def run_from_rankings(rankings: Mapping[str, Sequence[Document]]) -> Run:
    """Ranked Documents per query as a run (:func:`ranking_scores` of their ids)."""
    return {
        query_id: ranking_scores([document_id(document) for document in documents])
        for query_id, documents in rankings.items()
    }


def _ranx_inputs(run: Mapping[str, Mapping[str, float]], qrels: Judgements, name: str) -> Any:
    """ranx Qrels and Run (None when no judged query is answered)."""
    ranx = eval_library("ranx")
    if not qrels:
        raise ValueError("qrels must judge at least one query")
    ranx_qrels = ranx.Qrels.from_dict({query: dict(judged) for query, judged in qrels.items()})
    answered = {query: dict(scores) for query, scores in run.items() if scores and query in qrels}
    return ranx_qrels, ranx.Run.from_dict(answered, name=name) if answered else None


def per_query_scores(
    run: Mapping[str, Mapping[str, float]], qrels: Judgements, metric: str
) -> dict[str, float]:
    """Each judged query's ``metric`` (0 when unanswered), for cross-validation over queries."""
    ranx_qrels, ranx_run = _ranx_inputs(run, qrels, "run")
    if ranx_run is None:
        return dict.fromkeys(qrels, 0.0)
    eval_library("ranx").evaluate(ranx_qrels, ranx_run, metric, make_comparable=True)
    return {query: float(ranx_run.scores[metric].get(query, 0.0)) for query in qrels}


def evaluate_run(
    run: Mapping[str, Mapping[str, float]],
    qrels: Judgements,
    metrics: Sequence[str] = DEFAULT_METRICS,
) -> dict[str, float]:
    """Mean of each metric over the judged queries (unanswered queries count as 0)."""
    return {m: statistics.fmean(per_query_scores(run, qrels, m).values()) for m in metrics}


@dataclass(frozen=True)
class Comparison:
    """Mean scores of several runs and paired p-values of each against the first (the baseline)."""

    scores: dict[str, dict[str, float]]  # {run_name: {metric: mean}}, in the runs' order
    p_values: dict[str, dict[str, float]]  # {run_name: {metric: p}}; {} for the baseline
    baseline: str
    stat_test: str
    max_p: float

    def is_significant(self, run_name: str, metric: str) -> bool:
        """Whether the run differs from the baseline on the metric at ``p < max_p``."""
        p_value = self.p_values.get(run_name, {}).get(metric)
        return p_value is not None and p_value < self.max_p


def compare_runs(
    runs: Mapping[str, Mapping[str, Mapping[str, float]]],
    qrels: Judgements,
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    stat_test: str = "student",
    max_p: float = 0.05,
    permutations: int = 1000,
    random_seed: int = 42,
) -> Comparison:
    """Evaluate named runs with ``ranx.compare`` (``stat_test`` ``"student"`` or ``"fisher"``);
    p-values against the first run, 1.0 for identical per-query scores (ranx's NaN)."""
    if stat_test not in STAT_TESTS:
        raise ValueError(f"stat_test must be one of {STAT_TESTS}, got {stat_test!r}")
    if not runs:
        raise ValueError("runs must hold at least one named run")
    names, baseline = list(runs), next(iter(runs))
    ranx_runs = []
    for name in names:
        ranx_qrels, ranx_run = _ranx_inputs(runs[name], qrels, name)
        if ranx_run is None:
            raise ValueError(f"runs[{name!r}] answers none of the judged queries")
        ranx_runs.append(ranx_run)
    compared = eval_library("ranx").compare(
        ranx_qrels,
        ranx_runs,
        list(metrics),
        stat_test=stat_test,
        n_permutations=permutations,
        max_p=max_p,
        random_seed=random_seed,
        make_comparable=True,
    )
    report = compared.to_dict()
    scores = {name: {m: float(report[name]["scores"][m]) for m in metrics} for name in names}
    p_values: dict[str, dict[str, float]] = {baseline: {}}
    for name in names[1:]:
        against = report[baseline]["comparisons"][name]
        p_values[name] = {m: 1.0 if math.isnan(against[m]) else float(against[m]) for m in metrics}
    return Comparison(scores, p_values, baseline, stat_test, max_p)
