"""Evaluate retrieval setups on BEIR-layout datasets, with metrics and paired tests from ranx.

:mod:`.beir` loads, :mod:`.metrics` scores (ranx), :mod:`.cache` caches embeddings, :mod:`.setups`
names the kit's retrievers, :mod:`.experiment` runs and compares, :mod:`.report` writes JSON, table
rows and a chart, :mod:`.langsmith_experiment` runs LangSmith experiments. Nothing here prints.

>>> evaluate_run({"q1": {"d1": 2.0, "d2": 1.0}}, {"q1": {"d2": 1}}, ["mrr@10"])
{'mrr@10': 0.5}
"""

from rag_fusion_chain.evaluate.beir import BeirDataset, load_beir
from rag_fusion_chain.evaluate.cache import DEFAULT_CACHE_DIR, CachedEmbeddings
from rag_fusion_chain.evaluate.experiment import Experiment, run_experiment
from rag_fusion_chain.evaluate.langsmith_experiment import (
    LangSmithExperiment,
    langsmith_configured,
    run_langsmith_experiments,
)
from rag_fusion_chain.evaluate.metrics import (
    DEFAULT_METRICS,
    STAT_TESTS,
    Comparison,
    compare_runs,
    evaluate_run,
    run_from_rankings,
)
from rag_fusion_chain.evaluate.report import Summary, comparison_table, write_json, write_plot
from rag_fusion_chain.evaluate.setups import Indexes, Setup, run_setups, setup_by_name

__all__ = [
    "DEFAULT_CACHE_DIR",
    "DEFAULT_METRICS",
    "STAT_TESTS",
    "BeirDataset",
    "CachedEmbeddings",
    "Comparison",
    "Experiment",
    "Indexes",
    "LangSmithExperiment",
    "Setup",
    "Summary",
    "compare_runs",
    "comparison_table",
    "evaluate_run",
    "langsmith_configured",
    "load_beir",
    "run_experiment",
    "run_from_rankings",
    "run_langsmith_experiments",
    "run_setups",
    "setup_by_name",
    "write_json",
    "write_plot",
]
