"""Outputs of an evaluation: the JSON summary and a bar chart (matplotlib, Agg, no display)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rag_fusion_chain.evaluate.metrics import Comparison

Scores = Mapping[str, Mapping[str, float]]
"""``{setup_name: {metric: value}}``."""


def results_json(dataset: str, scores: Scores) -> dict[str, Any]:
    """The ``--json`` document: ``{"dataset": ..., "setups": {name: {metric: value}}}``.

    >>> results_json("scifact", {"bm25": {"ndcg@10": 0.6863}})
    {'dataset': 'scifact', 'setups': {'bm25': {'ndcg@10': 0.6863}}}
    """
    return {
        "dataset": dataset,
        "setups": {
            name: {metric: float(value) for metric, value in values.items()}
            for name, values in scores.items()
        },
    }


def write_json(path: str | Path, dataset: str, scores: Scores) -> Path:
    """Write :func:`results_json` to ``path`` (parents created), indented, and return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(results_json(dataset, scores), indent=2) + "\n", encoding="utf-8")
    return target


def write_plot(path: str | Path, dataset: str, scores: Scores) -> Path:
    """Draw one group of bars per setup, one bar per metric, values printed on the bars.

    Uses a bare :class:`matplotlib.figure.Figure` (Agg canvas), so it never opens a window and
    leaves pyplot's global state alone.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError('plots need matplotlib: pip install "rag-fusion-chain[eval]"') from error
    setups = list(scores)
    if not setups:
        raise ValueError("scores must hold at least one setup to plot")
    metrics = list(scores[setups[0]])
    group_width = 0.8
    bar_width = group_width / max(len(metrics), 1)
    figure = Figure(figsize=(max(6.0, 1.5 * len(setups) + 2.0), 4.8))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for index, metric in enumerate(metrics):
        offsets = [
            position - group_width / 2 + bar_width * (index + 0.5)
            for position in range(len(setups))
        ]
        values = [scores[setup].get(metric, 0.0) for setup in setups]
        bars = axes.bar(offsets, values, bar_width, label=metric)
        axes.bar_label(
            bars, labels=[f"{value:.3f}" for value in values], fontsize=7, rotation=90, padding=2
        )
    axes.set_xticks(range(len(setups)), setups, rotation=20, ha="right")
    axes.set_ylim(0, 1.18)
    axes.set_ylabel("score")
    axes.set_title(f"Retrieval quality on {dataset}")
    axes.legend(loc="upper center", ncols=len(metrics), fontsize=8, frameon=False)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, format="png", dpi=120)
    return target


def comparison_table(
    comparison: Comparison, p_metric: str | None = None
) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of a results table: the metrics, then the p-value of ``p_metric``.

    Every value that differs significantly from the baseline's (``p < max_p``, paired test) is
    marked ``*``; the p column (default: the first metric, nDCG@10) gives the exact p-value, ``-``
    for the baseline. One p column keeps the table within 80 columns; all p-values stay in
    ``comparison.p_values``. The CLI draws these rows; nothing here prints.

    >>> from rag_fusion_chain.evaluate.metrics import Comparison
    >>> table = comparison_table(Comparison(
    ...     {"a": {"map": 0.5}, "b": {"map": 0.7}}, {"a": {}, "b": {"map": 0.01}}, "a", "student", 0.05))
    >>> table
    (['setup', 'map', 'p map'], [['a', '0.5000', '-'], ['b', '0.7000*', '0.0100']])
    """
    metrics = list(comparison.scores[comparison.baseline])
    p_metric = p_metric or metrics[0]
    if p_metric not in metrics:
        raise ValueError(f"p_metric must be one of {metrics}, got {p_metric!r}")
    rows = []
    for name, scores in comparison.scores.items():
        cells = [
            f"{scores[metric]:.4f}{'*' if comparison.is_significant(name, metric) else ''}"
            for metric in metrics
        ]
        p_value = comparison.p_values.get(name, {}).get(p_metric)
        rows.append([name, *cells, "-" if p_value is None else f"{p_value:.4f}"])
    return ["setup", *metrics, f"p {p_metric}"], rows
