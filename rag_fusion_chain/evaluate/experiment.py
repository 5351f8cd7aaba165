"""One evaluation end to end: load a BEIR dataset, run the setups, compare them with ranx."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.runnables import Runnable

from rag_fusion_chain.evaluate.beir import BeirDataset, load_beir
from rag_fusion_chain.evaluate.cache import DEFAULT_CACHE_DIR
from rag_fusion_chain.evaluate.metrics import DEFAULT_METRICS, Run, compare_runs
from rag_fusion_chain.evaluate.report import Summary
from rag_fusion_chain.evaluate.setups import (
    DEFAULT_DEPTH,
    DEFAULT_RRF_K,
    DEFAULT_SETUPS,
    Indexes,
    ProgressCallback,
    Setup,
    ignore_progress,
    run_setups,
    setup_by_name,
)


@dataclass(frozen=True)
class Experiment:
    """What an evaluation produced: its :class:`Summary` (scores, settings, the paired tests
    against the first setup) and the runs."""

    summary: Summary
    runs: dict[str, Run]


def prepare_evaluation(
    dataset: str | Path | BeirDataset,
    setups: Sequence[str | Setup],
    *,
    split: str = "test",
    queries_limit: int | None = None,
    llm: Runnable[Any, Any] | None = None,
    embeddings: Embeddings | str | None = None,
    cache_dir: str | Path | None = DEFAULT_CACHE_DIR,
    depth: int = DEFAULT_DEPTH,
    rrf_k: float = DEFAULT_RRF_K,
    query_count: int = 4,
    progress: ProgressCallback = ignore_progress,
) -> tuple[BeirDataset, list[Setup], Indexes]:
    """The dataset loaded, the setups resolved by name, and the indexes they share (built on first
    use; ``embeddings``, an object or a ``models.embeddings`` name, cached under ``cache_dir``)."""
    if not setups:
        raise ValueError("setups must name at least one setup")
    resolved = [
        setup
        if isinstance(setup, Setup)
        else setup_by_name(setup, llm=llm, rrf_k=rrf_k, query_count=query_count)
        for setup in setups
    ]
    if not isinstance(dataset, BeirDataset):
        progress("loading dataset", 0, 1)
        dataset = load_beir(dataset, split=split, queries_limit=queries_limit)
        progress("loading dataset", 1, 1)
    return dataset, resolved, Indexes(dataset.corpus, embeddings, cache_dir, depth, progress)


def run_experiment(
    dataset: str | Path | BeirDataset,
    setups: Sequence[str | Setup] = DEFAULT_SETUPS,
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    stat_test: str = "student",
    max_p: float = 0.05,
    progress: ProgressCallback = ignore_progress,
    **options: Any,
) -> Experiment:
    """Evaluate ``setups`` (names or :class:`Setup` objects) on a BEIR dataset; the first is the
    baseline of the paired tests. ``options`` are :func:`prepare_evaluation`'s (``split``,
    ``queries_limit``, ``llm``, ``embeddings``, ``cache_dir``, ``depth``, ``rrf_k``,
    ``query_count``)."""
    dataset, resolved, indexes = prepare_evaluation(dataset, setups, progress=progress, **options)
    runs = run_setups(dataset, resolved, indexes, progress=progress)
    comparison = compare_runs(runs, dataset.qrels, metrics, stat_test=stat_test, max_p=max_p)
    summary = Summary(
        dataset.name,
        comparison.scores,
        dataset.split,
        len(dataset.queries),
        options.get("queries_limit"),
        {setup.name: dict(setup.settings) for setup in resolved},
        indexes.settings(),
        comparison,
    )
    return Experiment(summary, runs)
