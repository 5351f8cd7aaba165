"""Retrieval evaluation as LangSmith experiments: evaluators for ``langsmith.evaluate`` (a target
returning ``{"documents": [ids]}``, examples holding ``{"relevant": {id: grade}}``; each score is
ranx's, so their mean equals :func:`~.metrics.evaluate_run`'s) and a runner over BEIR datasets."""

from __future__ import annotations

import contextlib
import os
import statistics
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import langsmith
from langchain_core.documents import Document
from langchain_core.runnables import Runnable
from langsmith.schemas import Example

from rag_fusion_chain.evaluate.beir import BeirDataset
from rag_fusion_chain.evaluate.metrics import DEFAULT_METRICS, evaluate_run, ranking_scores
from rag_fusion_chain.evaluate.report import Summary
from rag_fusion_chain.evaluate.setups import (
    ProgressCallback,
    Setup,
    ignore_progress,
    prepare_evaluation,
    summarize,
)
from rag_fusion_chain.fusion import document_id
from rag_fusion_chain.validation import counted

_EXAMPLE_NAMESPACE = uuid.UUID("6f1c0f3e-5a52-4d1e-9a57-3c1f5e0b7a10")


def langsmith_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``LANGSMITH_API_KEY`` is set (``LANGSMITH_ENDPOINT`` is optional)."""
    return bool((os.environ if environ is None else environ).get("LANGSMITH_API_KEY", "").strip())


def retrieval_evaluator(metric: str) -> Callable[..., dict[str, Any]]:
    """An evaluator of ranx's ``metric`` for ``outputs["documents"]`` (ids or Documents; none, as
    from a failed run, scores 0) against ``reference_outputs["relevant"]``."""
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"metric must be a ranx metric name such as 'ndcg@10', got {metric!r}")

    def evaluator(
        outputs: Mapping[str, Any] | None, reference_outputs: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        relevant = (reference_outputs or {}).get("relevant") or {}
        judged = {str(key): int(grade) for key, grade in relevant.items()}
        if not judged:
            raise ValueError("reference_outputs['relevant'] must judge at least one document")
        ranked = [
            document_id(item) if isinstance(item, Document) else str(item)
            for item in (outputs or {}).get("documents") or []
        ]
        score = evaluate_run({"q": ranking_scores(ranked)}, {"q": judged}, [metric])[metric]
        return {"key": metric, "score": score}

    evaluator.__name__ = evaluator.__qualname__ = metric.replace("@", "_at_")
    return evaluator


def _name(dataset: BeirDataset) -> str:
    return f"{dataset.name}-{dataset.split}"  # e.g. scifact-test


def _examples(dataset: BeirDataset) -> list[dict[str, Any]]:
    """One example per judged query, its id stable across runs (a reused dataset is not
    duplicated): inputs ``{"question", "query_id"}``, outputs ``{"relevant"}``."""
    return [
        {
            "id": str(uuid.uuid5(_EXAMPLE_NAMESPACE, f"{_name(dataset)}\x00{query_id}")),
            "inputs": {"question": question, "query_id": query_id},
            "outputs": {"relevant": dict(dataset.qrels[query_id])},
        }
        for query_id, question in dataset.queries.items()
    ]


def local_examples(dataset: BeirDataset) -> list[Any]:
    """In-memory ``langsmith.schemas.Example`` objects, for an experiment that uploads nothing."""
    dataset_id = uuid.uuid5(_EXAMPLE_NAMESPACE, _name(dataset))
    return [Example(dataset_id=dataset_id, **example) for example in _examples(dataset)]


def sync_dataset(client: Any, dataset: BeirDataset) -> list[Any]:
    """Create or reuse the LangSmith dataset of ``dataset``, upload only the examples it lacks, and
    return the examples of ``dataset``'s queries in its order."""
    name = _name(dataset)
    if client.has_dataset(dataset_name=name):
        remote = client.read_dataset(dataset_name=name)
    else:
        description = f"BEIR {dataset.name} ({dataset.split}): queries and graded qrels"
        remote = client.create_dataset(name, description=description)
    existing = {str(example.id) for example in client.list_examples(dataset_id=remote.id)}
    examples = _examples(dataset)
    missing = [example for example in examples if example["id"] not in existing]
    if missing:
        client.create_examples(dataset_id=remote.id, examples=missing)
    by_id = {str(example.id): example for example in client.list_examples(dataset_id=remote.id)}
    return [by_id[example["id"]] for example in examples if example["id"] in by_id]


@dataclass(frozen=True)
class LangSmithExperiment:
    """One setup's experiment: its mean scores (equal to :func:`~.metrics.evaluate_run`'s) and
    where it is (``url`` None when nothing was uploaded)."""

    setup: str
    scores: dict[str, float]
    experiment_name: str
    url: str | None
    dataset_name: str
    uploaded: bool


def run_langsmith_experiments(
    dataset: str | Path | BeirDataset,
    setups: Sequence[str | Setup],
    *,
    progress: ProgressCallback = ignore_progress,
    client: Any = None,
    upload: bool = True,
    metrics: Sequence[str] = DEFAULT_METRICS,
    **options: Any,
) -> tuple[Summary, list[LangSmithExperiment]]:
    """One ``langsmith.evaluate`` experiment per setup, and their Summary; ``upload=False`` sends
    nothing (in-memory examples). ``options``: :func:`~.setups.prepare_evaluation`'s."""
    dataset, resolved, indexes = prepare_evaluation(dataset, setups, progress=progress, **options)
    if not dataset.queries:
        raise ValueError("dataset has no judged queries to evaluate")
    if upload:
        client = client or langsmith.Client()
        data = sync_dataset(client, dataset)
    else:  # a local client never asks the API for its settings
        client = client or langsmith.Client(api_key="local", api_url="http://127.0.0.1:9", info={})
        data = local_examples(dataset)
    evaluators = [retrieval_evaluator(metric) for metric in metrics]
    experiments = []
    for index, setup in enumerate(resolved):
        progress("langsmith experiments", index, len(resolved))
        with warnings.catch_warnings():  # langsmith warns that upload_runs=False is in beta
            warnings.filterwarnings("ignore", message=".*'upload_runs' parameter is in beta")
            results = langsmith.evaluate(
                _target(setup.build(indexes), upload),
                data=data,
                evaluators=evaluators,
                max_concurrency=0,
                client=client,
                upload_runs=upload,
                disable_evaluator_tracing=not upload,
                experiment_prefix=f"{_name(dataset)}-{setup.name}",
                description=setup.description or setup.name,
                metadata={"setup": setup.name, "dataset": dataset.name, "split": dataset.split},
            )
        url = None
        with contextlib.suppress(ValueError):  # the link is a convenience; the scores stand
            url = results.url if upload else None
        scores = _mean_scores(list(results), metrics, len(data))
        name, dataset_name = results.experiment_name, _name(dataset)
        experiments.append(LangSmithExperiment(setup.name, scores, name, url, dataset_name, upload))
    progress("langsmith experiments", len(resolved), len(resolved))
    by_setup = {experiment.setup: experiment.scores for experiment in experiments}
    return summarize(dataset, resolved, indexes, by_setup), experiments


def _target(retriever: Runnable[str, list[Document]], upload: bool) -> Callable[..., Any]:
    """The experiment's target: the ids ``retriever`` ranks; without upload, nothing is traced."""

    def target(inputs: dict[str, Any]) -> dict[str, list[str]]:
        # LangChain's tracer would send the retriever's runs even without upload
        with contextlib.nullcontext() if upload else langsmith.tracing_context(enabled=False):
            documents = retriever.invoke(inputs["question"])
        return {"documents": [document_id(document) for document in documents]}

    return target


def _mean_scores(rows: list[Any], metrics: Sequence[str], count: int) -> dict[str, float]:
    """Each metric's mean over the result rows; a missing score (an evaluator failed, which
    langsmith logs and goes on) is an error."""
    scores: dict[str, list[float]] = {metric: [] for metric in metrics}
    for row in rows:
        for result in row["evaluation_results"]["results"]:
            if result.key in scores and result.score is not None:
                scores[result.key].append(float(result.score))
    short = {metric: len(values) for metric, values in scores.items() if len(values) != count}
    if short:
        raise RuntimeError(
            f"of {counted(count, 'example')}, only {short} were scored; see the evaluator errors logged above"
        )
    return {metric: statistics.fmean(values) for metric, values in scores.items()}
