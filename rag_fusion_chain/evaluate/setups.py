"""Retrieval setups and the experiment that runs and compares them: each setup turns the shared
:class:`Indexes` (BM25 and dense, each built at most once) into a Runnable question -> Documents."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import Runnable

from rag_fusion_chain import chains, models, strategies
from rag_fusion_chain.evaluate.beir import BeirDataset, load_beir
from rag_fusion_chain.evaluate.cache import DEFAULT_CACHE_DIR, CachedEmbeddings
from rag_fusion_chain.evaluate.metrics import (
    DEFAULT_METRICS,
    Comparison,
    Run,
    compare_runs,
    run_from_rankings,
)
from rag_fusion_chain.evaluate.report import Summary
from rag_fusion_chain.fusion import FUSIONS, BaseFusion
from rag_fusion_chain.retrievers.bm25 import BM25Retriever  # imported by offline already
from rag_fusion_chain.retrievers.hybrid import hybrid_retriever

if TYPE_CHECKING:
    from rag_fusion_chain.retrievers.stores import VectorRetriever

ProgressCallback = Callable[[str, int, int], None]
"""``progress(task, completed, total)``: the CLI draws it; the library never prints."""

DEFAULT_DEPTH = 100
"""Documents retrieved per list and kept per query: Recall@100 needs 100."""
UNOFFERED_SETUPS = {  # setups that would only repeat another, with the reason
    "multi-query-offline": "its unique union keeps the question's own list first, so with offline "
    "queries it ranks as its first retriever does (equal to bm25 to four decimals on SciFact, "
    "p = 1.0). Use rag-fusion-offline, or multi-query with a chat model."
}
DEFAULT_SETUPS = ("bm25", "dense", "hybrid-rrf", "hybrid-relative", "hybrid-dist")
DEFAULT_RANK_CONSTANT = 30
"""``rank_constant`` of ``hybrid-rrf``: 10 and 30 beat 60 on both halves of SciFact's queries
(benchmarks/results/scifact_sweep.md); ``fusion.RRF_K`` stays 60."""
DEFAULT_HYBRID_FUSION = "dist"  # best on SciFact, chosen on either half of the queries
DEFAULT_HYBRID_WEIGHTS = (0.5, 0.5)  # (bm25, dense): no other was stably better in the sweep
OFFLINE_SUFFIX = "-offline"  # STRATEGY-offline: the strategy with its offline query step


def ignore_progress(task: str, completed: int, total: int) -> None:
    """The default progress callback: report nothing."""


@dataclass
class Indexes:
    """The corpus indexes setups share, each built on first use; ``embeddings`` (an object or a
    ``models.embeddings`` name) are loaded only for the dense one, cached under ``cache_dir``."""

    corpus: Sequence[Document]
    embeddings: Embeddings | str | None = None
    cache_dir: str | Path | None = DEFAULT_CACHE_DIR
    depth: int = DEFAULT_DEPTH
    progress: ProgressCallback = ignore_progress
    built: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def bm25(self) -> BM25Retriever:
        """The kit's BM25Retriever over the corpus, ``depth`` documents (built once)."""
        if "bm25" not in self.built:
            self.progress("indexing bm25", 0, 1)
            self.built["bm25"] = BM25Retriever.from_documents(self.corpus, k=self.depth)
            self.progress("indexing bm25", 1, 1)
        return self.built["bm25"]

    def dense(self) -> VectorRetriever:
        """The kit's VectorRetriever over a FAISS index of the corpus, ``depth`` documents."""
        if "dense" in self.built:
            return self.built["dense"]
        from rag_fusion_chain.retrievers.stores import VectorRetriever, build_faiss

        given = self.embeddings
        embeddings = given if isinstance(given, Embeddings) else models.embeddings(given)
        self.built["embedding"] = {
            "embedding": models.embedding_identity(embeddings),
            "precision": models.embedding_precision(embeddings),
        }
        task = "embedding corpus"
        self.progress(task, 0, len(self.corpus))
        if self.cache_dir is not None:
            report = functools.partial(self.progress, task)
            embeddings = cached = CachedEmbeddings(embeddings, self.cache_dir, on_progress=report)
        store = build_faiss(self.corpus, embeddings)
        if self.cache_dir is not None:  # its own cache (one the caller gave stays as given)
            cached.on_progress = None  # query batches are reported as querying
        self.progress(task, len(self.corpus), len(self.corpus))
        self.built["dense"] = VectorRetriever(vectorstore=store, k=self.depth)
        return self.built["dense"]

    def settings(self) -> dict[str, Any]:
        """What the indexes built so far were built with (depth; embedding identity, precision)."""
        return {"depth": self.depth, **self.built.get("embedding", {})}


@dataclass(frozen=True)
class Setup:
    """A named way to retrieve: ``build(indexes)`` returns a Runnable question -> Documents."""

    name: str
    build: Callable[[Indexes], Runnable[str, list[Document]]]
    description: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """What the setup retrieves with (retrievers, fusion and its parameters), for the JSON."""


def hybrid_setup(
    fusion: str | BaseFusion,
    *,
    name: str | None = None,
    weights: Sequence[float] = DEFAULT_HYBRID_WEIGHTS,
    rank_constant: float = DEFAULT_RANK_CONSTANT,
) -> Setup:
    """The kit's ``hybrid_retriever`` over BM25 and dense with ``fusion`` (a ``fusion.FUSIONS``
    name, ``"rrf"`` with ``rank_constant``, or a fusion object) and ``(bm25, dense)`` weights."""
    label = fusion if isinstance(fusion, str) else type(fusion).__name__
    if isinstance(fusion, str) and fusion not in FUSIONS:
        raise ValueError(f"fusion must be one of {sorted(FUSIONS)} or a BaseFusion, got {fusion!r}")
    given: dict[str, Any] = {"rank_constant": rank_constant} if fusion == "rrf" else {}
    chosen = FUSIONS[fusion](**given) if isinstance(fusion, str) else fusion
    settings: dict[str, Any] = {"retrievers": ["bm25", "dense"], "fusion": type(chosen).__name__}
    settings |= {**chosen.model_dump(include={"rank_constant"}), "weights": list(weights)}

    def build(indexes: Indexes) -> Runnable[str, list[Document]]:
        bm25, dense, depth = indexes.bm25(), indexes.dense(), indexes.depth
        return hybrid_retriever(
            bm25, dense, fusion=chosen, weights=list(weights), k=depth, fetch_k=depth
        )

    description = f"bm25 + dense, {label} fusion, weights {tuple(weights)}"
    return Setup(name or f"hybrid-{label}", build, description, settings)


def strategy_setup(
    strategy: str, llm: Runnable[Any, Any] | None = None, *, n: int | None = None
) -> Setup:
    """A strategy's retrieval over BM25 and dense, up to the answer, keeping ``depth`` passages
    (``n`` queries, default the strategy's, from ``llm`` or its offline step)."""
    record = strategies.get(strategy)
    count = record.default_n if n is None else n  # checked by chain_for when built

    def build(indexes: Indexes) -> Runnable[str, list[Document]]:
        retrievers, depth = [indexes.bm25(), indexes.dense()], indexes.depth
        retrieval = chains.retrieval_chain(record, retrievers, llm, n=count, k=depth, top_n=depth)
        return retrieval | chains.quoted_documents

    source = "offline" if llm is None else "chat model"
    settings = {"retrievers": ["bm25", "dense"], "strategy": strategy, "queries_from": source}
    name = strategy if llm is not None else f"{strategy}{OFFLINE_SUFFIX}"
    description = f"{strategy} ({source} queries) over bm25 + dense"
    return Setup(name, build, description, {**settings, "n": count})


def setup_by_name(
    name: str,
    *,
    llm: Runnable[Any, Any] | None = None,
    rank_constant: float = DEFAULT_RANK_CONSTANT,
    n: int | None = None,
) -> Setup:
    """A setup by its command-line name: ``bm25``, ``dense``, ``hybrid``, ``hybrid-`` and a
    ``fusion.FUSIONS`` name, a strategy (with ``llm``) or ``STRATEGY-offline``."""
    if name == "bm25":
        description = "BM25 (bm25s, English stemmer and stopwords)"
        return Setup(name, Indexes.bm25, description, {"retrievers": ["bm25"]})
    if name == "dense":
        return Setup(name, Indexes.dense, "dense (FAISS, cosine)", {"retrievers": ["dense"]})
    fusion = DEFAULT_HYBRID_FUSION if name == "hybrid" else name.removeprefix("hybrid-")
    if fusion in FUSIONS and name in ("hybrid", f"hybrid-{fusion}"):
        return hybrid_setup(fusion, name=name, rank_constant=rank_constant)
    if name in UNOFFERED_SETUPS:
        raise ValueError(f"setups: {name!r} is not offered: {UNOFFERED_SETUPS[name]}")
    strategy = name.removesuffix(OFFLINE_SUFFIX)
    if strategy in strategies.STRATEGIES:
        if name == strategy and llm is None:
            raise ValueError(
                f"setups: {name!r} needs a chat model (configure one, e.g. --model), "
                f"or use {name + OFFLINE_SUFFIX!r} for the offline query generator"
            )
        counted = n if strategies.get(strategy).default_n is not None else None  # n: theirs only
        return strategy_setup(strategy, llm if name == strategy else None, n=counted)
    offline = [strategy + OFFLINE_SUFFIX for strategy in strategies.STRATEGIES]
    known = [*DEFAULT_SETUPS, "hybrid", *(each for each in offline if each not in UNOFFERED_SETUPS)]
    raise ValueError(f"setups: unknown setup {name!r}; known: {', '.join(known)}")


def run_setups(
    dataset: BeirDataset,
    setups: Sequence[Setup],
    indexes: Indexes,
    *,
    batch_size: int = 32,
    progress: ProgressCallback = ignore_progress,
) -> dict[str, Run]:
    """One run per setup: every query of ``dataset`` through the setup's ``batch``, in chunks
    of ``batch_size`` (progress reported after each), as :func:`run_from_rankings`."""
    names = [setup.name for setup in setups]
    if len(set(names)) != len(names):
        raise ValueError(f"setups: names must be unique, got {names}")
    query_ids, texts = list(dataset.queries), list(dataset.queries.values())
    runs: dict[str, Run] = {}
    for setup in setups:
        runnable = setup.build(indexes)
        task = f"querying {setup.name}"
        progress(task, 0, len(texts))
        rankings: list[list[Document]] = []
        for start in range(0, len(texts), batch_size):
            rankings.extend(runnable.batch(texts[start : start + batch_size]))
            progress(task, len(rankings), len(texts))
        runs[setup.name] = run_from_rankings(dict(zip(query_ids, rankings, strict=True)))
    return runs


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
    rank_constant: float = DEFAULT_RANK_CONSTANT,
    n: int | None = None,
    progress: ProgressCallback = ignore_progress,
) -> tuple[BeirDataset, list[Setup], Indexes]:
    """The dataset loaded, the setups resolved by name, and the indexes they share (built on first
    use; ``embeddings``, an object or a ``models.embeddings`` name, cached under ``cache_dir``)."""
    if not setups:
        raise ValueError("setups must name at least one setup")
    by_name = functools.partial(setup_by_name, llm=llm, rank_constant=rank_constant, n=n)
    resolved = [setup if isinstance(setup, Setup) else by_name(setup) for setup in setups]
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
) -> Summary:
    """Evaluate ``setups`` (names or :class:`Setup` objects) on a BEIR dataset, the first the
    baseline of the paired tests; ``options``: :func:`prepare_evaluation`'s."""
    dataset, resolved, indexes = prepare_evaluation(dataset, setups, progress=progress, **options)
    runs = run_setups(dataset, resolved, indexes, progress=progress)
    comparison = compare_runs(runs, dataset.qrels, metrics, stat_test=stat_test, max_p=max_p)
    return summarize(dataset, resolved, indexes, comparison.scores, comparison)


def summarize(
    dataset: BeirDataset,
    setups: Sequence[Setup],
    indexes: Indexes,
    scores: Mapping[str, Mapping[str, float]],
    comparison: Comparison | None = None,
) -> Summary:
    """What the outputs of ``setups`` run on ``dataset`` show: scores, settings, the tests if any."""
    settings = {setup.name: dict(setup.settings) for setup in setups}
    size = (len(dataset.queries), dataset.queries_limit)
    return Summary(
        dataset.name, scores, dataset.split, *size, settings, indexes.settings(), comparison
    )
