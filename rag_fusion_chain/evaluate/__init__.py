"""Evaluate retrieval setups on BEIR-layout datasets with ranx metrics and paired tests, locally
or as LangSmith experiments, with an embedding cache; JSON and chart outputs. Nothing here prints."""

from rag_fusion_chain.evaluate.beir import BeirDataset, load_beir
from rag_fusion_chain.evaluate.cache import DEFAULT_CACHE_DIR, CachedEmbeddings
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
from rag_fusion_chain.evaluate.setups import (
    Indexes,
    Setup,
    run_experiment,
    run_setups,
    setup_by_name,
)

__all__ = [
    "DEFAULT_CACHE_DIR",
    "DEFAULT_METRICS",
    "STAT_TESTS",
    "BeirDataset",
    "CachedEmbeddings",
    "Comparison",
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
