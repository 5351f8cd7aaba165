"""Retrieval evaluation as LangSmith experiments: evaluators for ``langsmith.evaluate`` (a target
returning ``{"documents": [ids]}``, examples holding ``{"relevant": {id: grade}}``; each score is
ranx's, so their mean equals :func:`~.metrics.evaluate_run`'s) and a runner over BEIR datasets."""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from rag_fusion_chain.evaluate.beir import BeirDataset
from rag_fusion_chain.evaluate.experiment import prepare_evaluation
from rag_fusion_chain.evaluate.metrics import DEFAULT_METRICS, evaluate_run, ranking_scores
from rag_fusion_chain.evaluate.setups import Indexes, ProgressCallback, Setup, ignore_progress
from rag_fusion_chain.fusion import document_id

Evaluator = Callable[..., dict[str, Any]]

DOCUMENTS_KEY = "documents"
RELEVANT_KEY = "relevant"
_EXAMPLE_NAMESPACE = uuid.UUID("6f1c0f3e-5a52-4d1e-9a57-3c1f5e0b7a10")


def langsmith_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``LANGSMITH_API_KEY`` is set (``LANGSMITH_ENDPOINT`` is optional)."""
    return bool((os.environ if environ is None else environ).get("LANGSMITH_API_KEY", "").strip())


def retrieval_evaluator(metric: str) -> Evaluator:
    """An evaluator of ranx's ``metric`` for ``outputs["documents"]`` (ids or Documents; none, as
    from a failed run, scores 0) against ``reference_outputs["relevant"]``."""
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"metric must be a ranx metric name such as 'ndcg@10', got {metric!r}")

    def evaluator(
        outputs: Mapping[str, Any] | None, reference_outputs: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        relevant = (reference_outputs or {}).get(RELEVANT_KEY) or {}
        judged = {str(key): int(grade) for key, grade in relevant.items()}
        if not judged:
            raise ValueError(
                f"reference_outputs[{RELEVANT_KEY!r}] must judge at least one document"
            )
        ranked = [
            document_id(item) if isinstance(item, Document) else str(item)
            for item in (outputs or {}).get(DOCUMENTS_KEY) or []
        ]
        score = evaluate_run({"q": ranking_scores(ranked)}, {"q": judged}, [metric])[metric]
        return {"key": metric, "score": score}

    evaluator.__name__ = evaluator.__qualname__ = metric.replace("@", "_at_")
    return evaluator


def recall_at_k(k: int = 100) -> Evaluator:
    """The ``recall@k`` evaluator."""
    if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return retrieval_evaluator(f"recall@{k}")


ndcg_at_10: Evaluator = retrieval_evaluator("ndcg@10")
mrr_at_10: Evaluator = retrieval_evaluator("mrr@10")


def _examples(dataset: BeirDataset, name: str) -> list[dict[str, Any]]:
    """One example per judged query, with an id stable across runs (a reused dataset is not
    duplicated): inputs ``{"question", "query_id"}``, outputs ``{"relevant"}``."""
    return [
        {
            "id": uuid.uuid5(_EXAMPLE_NAMESPACE, f"{name}\x00{query_id}"),
            "inputs": {"question": question, "query_id": query_id},
            "outputs": {RELEVANT_KEY: dict(dataset.qrels[query_id])},
        }
        for query_id, question in dataset.queries.items()
    ]


def local_examples(dataset: BeirDataset, dataset_name: str | None = None) -> list[Any]:
    """In-memory ``langsmith.schemas.Example`` objects, for an experiment that uploads nothing."""
    from langsmith.schemas import Example

    name = dataset_name or f"{dataset.name}-{dataset.split}"
    dataset_id = uuid.uuid5(_EXAMPLE_NAMESPACE, name)
    return [Example(dataset_id=dataset_id, **example) for example in _examples(dataset, name)]


def sync_dataset(client: Any, dataset: BeirDataset, dataset_name: str | None = None) -> list[Any]:
    """Create or reuse the LangSmith dataset of ``dataset``, upload only the examples it lacks, and
    return the examples of ``dataset``'s queries in its order."""
    name = dataset_name or f"{dataset.name}-{dataset.split}"
    if client.has_dataset(dataset_name=name):
        remote = client.read_dataset(dataset_name=name)
    else:
        description = f"BEIR {dataset.name} ({dataset.split}): queries and graded qrels"
        remote = client.create_dataset(name, description=description)
    existing = {str(example.id) for example in client.list_examples(dataset_id=remote.id)}
    examples = [{**example, "id": str(example["id"])} for example in _examples(dataset, name)]
    missing = [example for example in examples if example["id"] not in existing]
    if missing:
        client.create_examples(dataset_id=remote.id, examples=missing)
    by_id = {str(example.id): example for example in client.list_examples(dataset_id=remote.id)}
    return [by_id[example["id"]] for example in examples if example["id"] in by_id]


@dataclass(frozen=True)
class LangSmithExperiment:
    """What :func:`run_langsmith_experiment` produced."""

    setup: str
    scores: dict[str, float]
    """``{metric: mean over the examples}``; equals :func:`~.metrics.evaluate_run`'s."""
    experiment_name: str
    url: str | None
    """The experiment in the LangSmith UI; ``None`` when nothing was uploaded."""
    dataset_name: str
    uploaded: bool


def run_langsmith_experiment(
    dataset: str | Path | BeirDataset,
    setup: str | Setup,
    *,
    indexes: Indexes | None = None,
    client: Any = None,
    upload: bool = True,
    metrics: Sequence[str] = DEFAULT_METRICS,
    experiment_prefix: str | None = None,
    dataset_name: str | None = None,
    max_concurrency: int | None = 0,
    **options: Any,
) -> LangSmithExperiment:
    """Run ``setup``'s retrieval over a BEIR dataset as a ``langsmith.evaluate`` experiment.

    ``upload=True`` syncs the LangSmith dataset (:func:`sync_dataset`) and uploads the experiment
    through ``client`` (default ``langsmith.Client()``); ``upload=False`` evaluates in-memory
    examples, uploads nothing and traces nothing. ``indexes`` lets setups share their indexes;
    ``options`` go to :func:`~.experiment.prepare_evaluation` (``split``, ``embeddings``, ...).
    """
    import langsmith

    dataset, (resolved,), prepared = prepare_evaluation(dataset, [setup], **options)
    if not dataset.queries:
        raise ValueError("dataset has no judged queries to evaluate")
    retriever = resolved.build(indexes or prepared)
    name = dataset_name or f"{dataset.name}-{dataset.split}"  # e.g. scifact-test
    if upload:
        client = client or langsmith.Client()
        data = sync_dataset(client, dataset, name)
    else:  # a local client never asks the API for its settings
        client = client or langsmith.Client(api_key="local", api_url="http://127.0.0.1:9", info={})
        data = local_examples(dataset, name)

    def target(inputs: dict[str, Any]) -> dict[str, list[str]]:
        if upload:
            documents = retriever.invoke(inputs["question"])
        else:  # LangChain's tracer would send the retriever's runs even without upload
            with langsmith.tracing_context(enabled=False):
                documents = retriever.invoke(inputs["question"])
        return {DOCUMENTS_KEY: [document_id(document) for document in documents]}

    with warnings.catch_warnings():  # langsmith warns that upload_runs=False is in beta
        warnings.filterwarnings("ignore", message=".*'upload_runs' parameter is in beta")
        results = langsmith.evaluate(
            target,
            data=data,
            evaluators=[retrieval_evaluator(metric) for metric in metrics],
            experiment_prefix=experiment_prefix or f"{name}-{resolved.name}",
            description=resolved.description or resolved.name,
            metadata={"setup": resolved.name, "dataset": dataset.name, "split": dataset.split},
            max_concurrency=max_concurrency,
            client=client,
            upload_runs=upload,
            disable_evaluator_tracing=not upload,
        )
    try:
        url = results.url if upload else None
    except Exception:  # noqa: BLE001 - the link is a convenience; the scores stand without it
        url = None
    scores = _mean_scores(list(results), metrics, len(data))
    return LangSmithExperiment(resolved.name, scores, results.experiment_name, url, name, upload)


def _mean_scores(rows: list[Any], metrics: Sequence[str], count: int) -> dict[str, float]:
    """Mean of each metric's feedback over the result rows; a missing score is an error."""
    totals = dict.fromkeys(metrics, 0.0)
    for row in rows:
        scored = {
            r.key: r.score for r in row["evaluation_results"]["results"] if r.score is not None
        }
        missing = sorted(set(totals) - set(scored))
        if missing:  # an evaluator failed; langsmith logged it and went on
            raise RuntimeError(
                f"example {row['example'].id}: no score for {missing}; "
                "see the evaluator error logged above"
            )
        for metric in totals:
            totals[metric] += float(scored[metric])
    if len(rows) != count:
        raise RuntimeError(f"langsmith.evaluate returned {len(rows)} results for {count} examples")
    return {metric: total / count for metric, total in totals.items()}


def run_langsmith_experiments(
    dataset: str | Path | BeirDataset,
    setups: Sequence[str | Setup],
    *,
    progress: ProgressCallback = ignore_progress,
    client: Any = None,
    upload: bool = True,
    metrics: Sequence[str] = DEFAULT_METRICS,
    **options: Any,
) -> tuple[BeirDataset, list[LangSmithExperiment]]:
    """One :func:`run_langsmith_experiment` per setup, sharing the dataset and its indexes
    (``options``: :func:`~.experiment.prepare_evaluation`'s); returns the dataset and experiments."""
    dataset, resolved, indexes = prepare_evaluation(dataset, setups, progress=progress, **options)
    experiments = []
    for index, setup in enumerate(resolved):
        progress("langsmith experiments", index, len(resolved))
        experiments.append(
            run_langsmith_experiment(
                dataset, setup, indexes=indexes, client=client, upload=upload, metrics=metrics
            )
        )
    progress("langsmith experiments", len(resolved), len(resolved))
    return dataset, experiments
