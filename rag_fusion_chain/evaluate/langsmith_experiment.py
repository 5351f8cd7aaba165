"""Retrieval evaluation as a LangSmith experiment: evaluators and a runner for ``langsmith.evaluate``.

The evaluators are plain functions in the ``(outputs, reference_outputs) -> dict`` form that
``langsmith.evaluate`` accepts, so they work in any experiment whose target returns
``{"documents": [document ids in rank order]}`` and whose examples hold
``{"relevant": {document_id: grade}}`` as reference outputs::

    from langsmith import evaluate
    from rag_fusion_chain.evaluate.langsmith_experiment import ndcg_at_10, recall_at_k

    evaluate(my_retrieval, data="my-dataset", evaluators=[ndcg_at_10, recall_at_k(20)])

Each score is ranx's on a one-query run (via :func:`~.metrics.evaluate_run`), with the ranking
turned into rank-derived scores as :func:`~.metrics.run_from_rankings` does, so the mean over the
examples equals :func:`~.metrics.evaluate_run` on the whole dataset.

:func:`run_langsmith_experiment` runs one :class:`~.setups.Setup` over a BEIR dataset as an
experiment: uploaded to LangSmith (the dataset created or reused under the BEIR directory's name)
or, with ``upload=False``, entirely in this process.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import Runnable

from rag_fusion_chain.evaluate.beir import BeirDataset, load_beir
from rag_fusion_chain.evaluate.cache import DEFAULT_CACHE_DIR
from rag_fusion_chain.evaluate.experiment import prepare_evaluation
from rag_fusion_chain.evaluate.metrics import DEFAULT_METRICS, evaluate_run
from rag_fusion_chain.evaluate.setups import (
    DEFAULT_DEPTH,
    Indexes,
    ProgressCallback,
    Setup,
    ignore_progress,
    setup_by_name,
)
from rag_fusion_chain.fusion import document_id

Evaluator = Callable[..., dict[str, Any]]
"""``evaluator(outputs, reference_outputs) -> {"key": metric, "score": value}``."""

API_KEY_ENV = "LANGSMITH_API_KEY"
ENDPOINT_ENV = "LANGSMITH_ENDPOINT"
DOCUMENTS_KEY = "documents"
"""The target's output key: document ids in rank order."""
RELEVANT_KEY = "relevant"
"""The example's reference output key: ``{document_id: grade}``."""
_EXAMPLE_NAMESPACE = uuid.UUID("6f1c0f3e-5a52-4d1e-9a57-3c1f5e0b7a10")


def langsmith_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether LangSmith is configured: ``LANGSMITH_API_KEY`` is set (the endpoint is optional).

    >>> langsmith_configured({}), langsmith_configured({"LANGSMITH_API_KEY": "lsv2-..."})
    (False, True)
    """
    environ = os.environ if environ is None else environ
    return bool(environ.get(API_KEY_ENV, "").strip())


def _langsmith():  # type: ignore[no-untyped-def]
    try:
        import langsmith
    except ImportError as error:  # pragma: no cover - langsmith comes with langchain-core
        raise ImportError(
            'LangSmith experiments need langsmith: pip install "langsmith"'
        ) from error
    return langsmith


# ------------------------------------------------------------------------------------ evaluators


def ranking_scores(document_ids: Sequence[str]) -> dict[str, float]:
    """Rank-derived scores ``len - position`` (duplicates keep their best rank), as ranx input.

    >>> ranking_scores(["d2", "d1", "d2"])
    {'d2': 3.0, 'd1': 2.0}
    """
    scores: dict[str, float] = {}
    for position, identifier in enumerate(document_ids):
        scores.setdefault(str(identifier), float(len(document_ids) - position))
    return scores


def score_ranking(document_ids: Sequence[str], relevant: Mapping[str, int], metric: str) -> float:
    """ranx's ``metric`` (e.g. ``"ndcg@10"``) for one ranked list against its judgements.

    >>> score_ranking(["d1", "d2"], {"d2": 1}, "mrr@10")
    0.5
    """
    judged = {str(key): int(value) for key, value in relevant.items()}
    if not judged:
        raise ValueError(f"reference_outputs[{RELEVANT_KEY!r}] must judge at least one document")
    run = {"q": ranking_scores(document_ids)}
    return evaluate_run(run, {"q": judged}, [metric])[metric]


def retrieval_evaluator(metric: str) -> Evaluator:
    """An evaluator for ``langsmith.evaluate`` scoring ranx's ``metric`` (feedback key: metric).

    It reads ``outputs["documents"]`` (ids in rank order; missing or ``None`` outputs, as from a
    failed run, score 0) and ``reference_outputs["relevant"]`` (``{id: grade}``).

    >>> map_evaluator = retrieval_evaluator("map")
    >>> map_evaluator({"documents": ["d1", "d2"]}, {"relevant": {"d2": 1}})
    {'key': 'map', 'score': 0.5}
    """
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"metric must be a ranx metric name such as 'ndcg@10', got {metric!r}")

    def evaluator(
        outputs: Mapping[str, Any] | None, reference_outputs: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        if not reference_outputs or RELEVANT_KEY not in reference_outputs:
            raise ValueError(
                f"reference_outputs must hold {RELEVANT_KEY!r}: {{document_id: grade}}"
            )
        ranked = (outputs or {}).get(DOCUMENTS_KEY) or []
        identifiers = [
            document_id(item) if isinstance(item, Document) else str(item) for item in ranked
        ]
        score = score_ranking(identifiers, reference_outputs[RELEVANT_KEY], metric)
        return {"key": metric, "score": score}

    evaluator.__name__ = evaluator.__qualname__ = metric.replace("@", "_at_")
    evaluator.__doc__ = f"ranx {metric} of outputs['documents'] against reference 'relevant'."
    return evaluator


def recall_at_k(k: int = 100) -> Evaluator:
    """The ``recall@k`` evaluator (feedback key ``recall@k``).

    >>> recall_at_k(2)({"documents": ["d1", "d2", "d3"]}, {"relevant": {"d2": 1, "d3": 1}})
    {'key': 'recall@2', 'score': 0.5}
    """
    if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return retrieval_evaluator(f"recall@{k}")


ndcg_at_10: Evaluator = retrieval_evaluator("ndcg@10")
"""nDCG@10 (ranx, graded relevance), feedback key ``ndcg@10``."""
mrr_at_10: Evaluator = retrieval_evaluator("mrr@10")
"""MRR@10 (ranx), feedback key ``mrr@10``."""


def evaluators_for(metrics: Sequence[str] = DEFAULT_METRICS) -> list[Evaluator]:
    """One evaluator per ranx metric name, e.g. ``DEFAULT_METRICS``."""
    return [retrieval_evaluator(metric) for metric in metrics]


# ------------------------------------------------------------------------------------ examples


def example_id(dataset_name: str, query_id: str) -> uuid.UUID:
    """A stable example id for a query of a dataset, so a reused dataset is not duplicated."""
    return uuid.uuid5(_EXAMPLE_NAMESPACE, f"{dataset_name}\x00{query_id}")


def example_records(dataset: BeirDataset) -> list[dict[str, Any]]:
    """The examples of a BEIR dataset: inputs ``{"question", "query_id"}``, outputs ``{"relevant"}``.

    Only judged queries of the split, in qrels order.
    """
    return [
        {
            "inputs": {"question": dataset.queries[query_id], "query_id": query_id},
            "outputs": {RELEVANT_KEY: dict(dataset.qrels[query_id])},
        }
        for query_id in dataset.queries
    ]


def local_examples(dataset: BeirDataset, dataset_name: str | None = None) -> list[Any]:
    """In-memory ``langsmith.schemas.Example`` objects for an experiment that uploads nothing."""
    from langsmith.schemas import Example

    name = dataset_name or langsmith_dataset_name(dataset)
    dataset_id = uuid.uuid5(_EXAMPLE_NAMESPACE, name)
    return [
        Example(
            id=example_id(name, record["inputs"]["query_id"]),
            dataset_id=dataset_id,
            inputs=record["inputs"],
            outputs=record["outputs"],
        )
        for record in example_records(dataset)
    ]


def langsmith_dataset_name(dataset: BeirDataset) -> str:
    """The LangSmith dataset of a BEIR dataset: its directory name and split, e.g. ``scifact-test``."""
    return f"{dataset.name}-{dataset.split}"


def sync_dataset(client: Any, dataset: BeirDataset, dataset_name: str | None = None) -> list[Any]:
    """Create or reuse the LangSmith dataset of ``dataset``; add the queries it lacks.

    Examples have stable ids (:func:`example_id`), so running again, or with more queries,
    uploads only what is missing. Returns the examples of ``dataset``'s queries, in its order.
    """
    name = dataset_name or langsmith_dataset_name(dataset)
    if client.has_dataset(dataset_name=name):
        remote = client.read_dataset(dataset_name=name)
    else:
        remote = client.create_dataset(
            name,
            description=f"BEIR {dataset.name} ({dataset.split}): queries and graded qrels",
        )
    existing = {str(example.id) for example in client.list_examples(dataset_id=remote.id)}
    records = example_records(dataset)
    ids = [str(example_id(name, record["inputs"]["query_id"])) for record in records]
    missing = [(i, r) for i, r in zip(ids, records, strict=True) if i not in existing]
    if missing:
        client.create_examples(
            dataset_id=remote.id,
            examples=[
                {"id": i, "inputs": r["inputs"], "outputs": r["outputs"]} for i, r in missing
            ],
        )
    wanted = set(ids)
    by_id = {
        str(example.id): example
        for example in client.list_examples(dataset_id=remote.id)
        if str(example.id) in wanted
    }
    return [by_id[i] for i in ids if i in by_id]


# ------------------------------------------------------------------------------------ experiment


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


def retrieval_target(
    retriever: Runnable[str, list[Document]], *, trace: bool = True
) -> Callable[[dict[str, Any]], dict[str, list[str]]]:
    """Wrap a Runnable ``question -> list[Document]`` as a target: ``{"documents": [ids]}``.

    ``trace=False`` turns tracing off inside the target: ``langsmith.evaluate`` without upload
    keeps its own runs local, but LangChain's tracer would still send the retriever's runs.
    """

    def retrieve(inputs: dict[str, Any]) -> dict[str, list[str]]:
        if trace:
            documents = retriever.invoke(inputs["question"])
        else:
            with _langsmith().tracing_context(enabled=False):
                documents = retriever.invoke(inputs["question"])
        return {DOCUMENTS_KEY: [document_id(document) for document in documents]}

    return retrieve


def run_langsmith_experiment(
    dataset: str | Path | BeirDataset,
    setup: str | Setup,
    *,
    client: Any = None,
    experiment_prefix: str | None = None,
    upload: bool = True,
    metrics: Sequence[str] = DEFAULT_METRICS,
    indexes: Indexes | None = None,
    split: str = "test",
    queries_limit: int | None = None,
    llm: Runnable[Any, Any] | None = None,
    embeddings: Embeddings | str | None = None,
    cache_dir: str | Path | None = DEFAULT_CACHE_DIR,
    depth: int = DEFAULT_DEPTH,
    max_concurrency: int | None = 0,
    dataset_name: str | None = None,
) -> LangSmithExperiment:
    """Run ``setup``'s retrieval over a BEIR dataset as a ``langsmith.evaluate`` experiment.

    ``upload=True`` creates or reuses the LangSmith dataset (:func:`sync_dataset`) and uploads
    the experiment through ``client`` (default: ``langsmith.Client()`` from the environment).
    ``upload=False`` evaluates in-memory examples and uploads nothing; without a ``client`` a
    local one is made that never asks the API for its settings.

    ``indexes`` lets several setups share the BM25 and dense indexes (default: built here from
    the dataset's corpus with ``embeddings``, ``cache_dir`` and ``depth``). Returns the mean of
    each metric over the examples, and where the experiment is.
    """
    langsmith = _langsmith()
    if not isinstance(dataset, BeirDataset):
        dataset = load_beir(dataset, split=split, queries_limit=queries_limit)
    if not dataset.queries:
        raise ValueError("dataset has no judged queries to evaluate")
    resolved = setup if isinstance(setup, Setup) else setup_by_name(setup, llm=llm)
    if indexes is None:
        indexes = Indexes(dataset.corpus, embeddings, cache_dir, depth=depth)
    name = dataset_name or langsmith_dataset_name(dataset)
    if upload:
        client = client or langsmith.Client()
        data = sync_dataset(client, dataset, name)
    else:
        if client is None:
            client = langsmith.Client(api_key="local", api_url="http://127.0.0.1:9", info={})
        data = local_examples(dataset, name)
    target = retrieval_target(resolved.build(indexes), trace=upload)
    with warnings.catch_warnings():  # langsmith warns that upload_runs=False is in beta
        warnings.filterwarnings("ignore", message=".*'upload_runs' parameter is in beta")
        results = langsmith.evaluate(
            target,
            data=data,
            evaluators=evaluators_for(metrics),
            experiment_prefix=experiment_prefix or f"{name}-{resolved.name}",
            description=resolved.description or resolved.name,
            metadata={"setup": resolved.name, "dataset": dataset.name, "split": dataset.split},
            max_concurrency=max_concurrency,
            client=client,
            upload_runs=upload,
            disable_evaluator_tracing=not upload,
        )
    return LangSmithExperiment(
        setup=resolved.name,
        scores=_mean_scores(results, metrics, len(data)),
        experiment_name=results.experiment_name,
        url=_experiment_url(results) if upload else None,
        dataset_name=name,
        uploaded=upload,
    )


def _mean_scores(results: Any, metrics: Sequence[str], count: int) -> dict[str, float]:
    """Mean of each metric's feedback over the result rows; a missing score is an error."""
    totals = dict.fromkeys(metrics, 0.0)
    rows = 0
    for row in results:
        rows += 1
        scored = set()
        for result in row["evaluation_results"]["results"]:
            if result.key in totals and result.score is not None:
                totals[result.key] += float(result.score)
                scored.add(result.key)
        if scored != set(totals):  # an evaluator failed; langsmith logged it and went on
            raise RuntimeError(
                f"example {row['example'].id}: no score for {sorted(set(totals) - scored)}; "
                "see the evaluator error logged above"
            )
    if rows != count:
        raise RuntimeError(f"langsmith.evaluate returned {rows} results for {count} examples")
    return {metric: total / count for metric, total in totals.items()}


def _experiment_url(results: Any) -> str | None:
    try:
        return results.url
    except Exception:  # noqa: BLE001 - the link is a convenience; the scores stand without it
        return None


def run_langsmith_experiments(
    dataset: str | Path | BeirDataset,
    setups: Sequence[str | Setup],
    *,
    split: str = "test",
    queries_limit: int | None = None,
    llm: Runnable[Any, Any] | None = None,
    embeddings: Embeddings | str | None = None,
    cache_dir: str | Path | None = DEFAULT_CACHE_DIR,
    depth: int = DEFAULT_DEPTH,
    query_count: int = 4,
    progress: ProgressCallback = ignore_progress,
    **options: Any,
) -> tuple[BeirDataset, list[LangSmithExperiment]]:
    """One :func:`run_langsmith_experiment` per setup, sharing the dataset and its indexes.

    ``options`` go to :func:`run_langsmith_experiment` (``client``, ``upload``, ``metrics``...).
    Returns the loaded dataset and the experiments in the order of ``setups``.
    """
    dataset, resolved, indexes = prepare_evaluation(
        dataset,
        setups,
        split=split,
        queries_limit=queries_limit,
        llm=llm,
        embeddings=embeddings,
        cache_dir=cache_dir,
        depth=depth,
        query_count=query_count,
        progress=progress,
    )
    experiments = []
    for index, setup in enumerate(resolved):
        progress("langsmith experiments", index, len(resolved))
        experiments.append(run_langsmith_experiment(dataset, setup, indexes=indexes, **options))
    progress("langsmith experiments", len(resolved), len(resolved))
    return dataset, experiments
