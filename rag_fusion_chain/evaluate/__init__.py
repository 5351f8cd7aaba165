"""Evaluate retrieval setups on BEIR-layout datasets, with metrics and significance from ranx.

>>> from rag_fusion_chain.evaluate import load_beir, evaluate_run
>>> evaluate_run({"q1": {"d1": 2.0, "d2": 1.0}}, {"q1": {"d2": 1}}, ["mrr@10"])
{'mrr@10': 0.5}

Modules: :mod:`.beir` (loading), :mod:`.metrics` (ranx), :mod:`.cache` (embedding cache),
:mod:`.setups` (the kit's retrievers as named setups), :mod:`.experiment` (load, run, compare),
:mod:`.report` (JSON, table rows, plot),
:mod:`.langsmith_experiment` (evaluators and experiments for ``langsmith.evaluate``). Nothing here prints: progress goes to callbacks.
"""

from rag_fusion_chain.evaluate.beir import (
    BeirDataset,
    Qrels,
    corpus_document,
    load_beir,
    read_qrels,
)
from rag_fusion_chain.evaluate.cache import DEFAULT_CACHE_DIR, CachedEmbeddings, EmbeddingStore
from rag_fusion_chain.evaluate.experiment import Experiment, run_experiment
from rag_fusion_chain.evaluate.langsmith_experiment import (
    LangSmithExperiment,
    langsmith_configured,
    mrr_at_10,
    ndcg_at_10,
    recall_at_k,
    retrieval_evaluator,
    run_langsmith_experiment,
    run_langsmith_experiments,
)
from rag_fusion_chain.evaluate.metrics import (
    DEFAULT_METRICS,
    STAT_TESTS,
    Comparison,
    Run,
    compare_runs,
    evaluate_run,
    run_from_rankings,
)
from rag_fusion_chain.evaluate.report import (
    Summary,
    comparison_table,
    results_json,
    value_labels,
    write_json,
    write_plot,
    y_limits,
)
from rag_fusion_chain.evaluate.setups import (
    DEFAULT_DEPTH,
    DEFAULT_HYBRID_FUSION,
    DEFAULT_HYBRID_WEIGHTS,
    DEFAULT_RRF_K,
    DEFAULT_SETUPS,
    Indexes,
    ProgressCallback,
    Setup,
    hybrid_setup,
    run_setups,
    setup_by_name,
    strategy_setup,
)

__all__ = [
    "DEFAULT_CACHE_DIR",
    "DEFAULT_DEPTH",
    "DEFAULT_HYBRID_FUSION",
    "DEFAULT_HYBRID_WEIGHTS",
    "DEFAULT_METRICS",
    "DEFAULT_RRF_K",
    "DEFAULT_SETUPS",
    "STAT_TESTS",
    "BeirDataset",
    "CachedEmbeddings",
    "Comparison",
    "EmbeddingStore",
    "Experiment",
    "Indexes",
    "LangSmithExperiment",
    "ProgressCallback",
    "Qrels",
    "Run",
    "Setup",
    "Summary",
    "compare_runs",
    "comparison_table",
    "corpus_document",
    "evaluate_run",
    "hybrid_setup",
    "langsmith_configured",
    "load_beir",
    "mrr_at_10",
    "ndcg_at_10",
    "read_qrels",
    "recall_at_k",
    "results_json",
    "retrieval_evaluator",
    "run_experiment",
    "run_from_rankings",
    "run_langsmith_experiment",
    "run_langsmith_experiments",
    "run_setups",
    "setup_by_name",
    "strategy_setup",
    "write_json",
    "value_labels",
    "write_plot",
    "y_limits",
]
