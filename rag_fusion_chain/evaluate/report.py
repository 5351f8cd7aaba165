"""Outputs of an evaluation: the JSON summary, the results table, a bar chart (matplotlib, Agg)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Column, Table

from rag_fusion_chain.evaluate.metrics import Comparison, eval_library
from rag_fusion_chain.validation import counted


@dataclass(frozen=True)
class Summary:
    """What an evaluation's outputs show: the data, the scores, each setup's and the indexes'
    settings, and the comparison (p-values, significance; absent for LangSmith experiments)."""

    dataset: str
    scores: Mapping[str, Mapping[str, float]]  # {setup_name: {metric: value}}
    split: str = "test"
    query_count: int | None = None
    queries_limit: int | None = None
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    indexes: Mapping[str, Any] = field(default_factory=dict)
    comparison: Comparison | None = None

    @property
    def title(self) -> str:
        """``dataset (split, N queries)``, naming ``--queries-limit`` when the queries were cut."""
        parts = [self.split]
        parts += [] if self.query_count is None else [counted(self.query_count, "query", "queries")]
        parts += [] if self.queries_limit is None else [f"--queries-limit {self.queries_limit}"]
        return f"{self.dataset} ({', '.join(parts)})"


def results_json(summary: Summary) -> dict[str, Any]:
    """The ``--json`` document: the data, ``setups`` (``{metric: mean}`` each), their settings,
    and ``p_values`` (``{metric: p}`` against ``test.baseline``; absent without a comparison)."""
    document: dict[str, Any] = {
        "dataset": summary.dataset,
        "split": summary.split,
        "query_count": summary.query_count,
        "queries_limit": summary.queries_limit,
        "setups": {
            name: {metric: float(value) for metric, value in values.items()}
            for name, values in summary.scores.items()
        },
        "settings": {name: dict(summary.settings.get(name, {})) for name in summary.scores},
        "indexes": dict(summary.indexes),
    }
    if (comparison := summary.comparison) is not None:
        document["test"] = {
            "baseline": comparison.baseline,
            "stat_test": comparison.stat_test,
            "max_p": comparison.max_p,
        }
        document["p_values"] = {
            name: {metric: float(p) for metric, p in comparison.p_values.get(name, {}).items()}
            for name in summary.scores
        }
    return document


def write_json(path: str | Path, summary: Summary) -> Path:
    """Write :func:`results_json` to ``path`` (parents created), indented, and return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(results_json(summary), indent=2) + "\n", encoding="utf-8")
    return target


def y_limits(values: Sequence[float]) -> tuple[float, float]:
    """The chart's y range: zoomed to the data (differences of hundredths stay visible), never
    below 0, with room for the value labels."""
    if not values:
        raise ValueError("values must hold at least one score")
    low, high = min(values), max(values)
    spread = max(high - low, 0.05)
    bottom = max(0.0, math.floor((low - 0.4 * spread) * 100) / 100)
    top = math.ceil((high + 0.6 * spread) * 100) / 100
    return bottom, top


def marked_score(summary: Summary, setup: str, metric: str, digits: int = 3) -> str:
    """A setup's score for ``metric``, ``*`` when significantly different from the baseline."""
    test = summary.comparison
    star = "*" if test and test.is_significant(setup, metric) else ""
    return f"{summary.scores[setup].get(metric, 0.0):.{digits}f}{star}"


def write_plot(path: str | Path, summary: Summary) -> Path:
    """A bar chart, a group per setup and a labelled bar per metric, significant ones hatched."""
    Figure = eval_library("matplotlib.figure").Figure  # noqa: N806 (the class)
    scores, setups = summary.scores, list(summary.scores)
    if not setups:
        raise ValueError("scores must hold at least one setup to plot")
    metrics = list(scores[setups[0]])
    group_width = 0.8
    bar_width = group_width / max(len(metrics), 1)
    figure = Figure(figsize=(max(6.0, 1.5 * len(setups) + 2.0), 4.8))  # Agg renders a PNG
    axes = figure.add_subplot()
    for index, metric in enumerate(metrics):
        start = bar_width * (index + 0.5) - group_width / 2
        values = [scores[setup].get(metric, 0.0) for setup in setups]
        bars = axes.bar(
            [start + position for position in range(len(setups))], values, bar_width, label=metric
        )
        labels = [marked_score(summary, setup, metric) for setup in setups]
        for bar, label in zip(bars, labels, strict=True):
            if label.endswith("*"):
                bar.set_hatch("//")
        axes.bar_label(bars, labels=labels, fontsize=7, rotation=90, padding=2)
    every_value = [value for values in scores.values() for value in values.values()]
    axes.set_ylim(*y_limits(every_value))
    axes.set_xticks(range(len(setups)), setups, rotation=20, ha="right")
    axes.set_ylabel("score (axis zoomed to the data)")
    axes.set_title(f"Retrieval quality on {summary.title}")
    if (test := summary.comparison) is not None:
        note = f"* hatched: p < {test.max_p} against {test.baseline} (paired {test.stat_test} test)"
        figure.text(0.01, 0.01, note, fontsize=7)
    axes.legend(loc="upper center", ncols=len(metrics), fontsize=8, frameon=False)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, format="png", dpi=120)
    return target


def comparison_table(summary: Summary, experiments: Sequence[str] = ()) -> Table:
    """The results table: the metrics (``*``: significant), comparing several setups the p-values
    of the first metric (one column fits 80) under the test's caption, or the LangSmith experiments."""
    metrics = list(next(iter(summary.scores.values()), {}))
    test = summary.comparison if len(summary.scores) > 1 else None  # one setup: no p column
    title = f"{summary.title}, LangSmith experiments" if experiments else summary.title
    table = Table("setup", *(Column(metric, justify="right") for metric in metrics), title=title)
    if test:
        table.add_column(f"p {metrics[0]}", justify="right")
        tested = f"paired {test.stat_test} test against {test.baseline}"
        table.caption = f"p: {tested}; * p < {test.max_p}"
    if experiments:
        table.add_column("experiment")
    extra_cells = [[experiment] for experiment in experiments] or [[]] * len(summary.scores)
    for name, extra in zip(summary.scores, extra_cells, strict=True):  # one experiment a setup
        row = [name, *(marked_score(summary, name, metric, 4) for metric in metrics)]
        if test:
            p_value = test.p_values.get(name, {}).get(metrics[0])
            row.append("-" if p_value is None else f"{p_value:.4f}")
        table.add_row(*row, *extra)
    return table
