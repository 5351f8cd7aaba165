"""Fan-out: run several queries over several retrievers at once, and fuse them as one retriever.

:class:`MultiRetriever` maps queries over retrievers, every (query, retriever) pair concurrently,
bounded by ``max_concurrency``; its output feeds any fusion runnable. :class:`FusionRetriever` wraps
query generation, fan-out and fusion in a ``BaseRetriever``, to drop in wherever a retriever goes.

>>> from langchain_core.retrievers import BaseRetriever
>>> class Echo(BaseRetriever):
...     def _get_relevant_documents(self, query, *, run_manager):
...         return [Document(query)]
>>> ranked_lists = MultiRetriever([Echo(), Echo()], weights=[2.0, 1.0]).invoke(["a", "b"])
>>> [(ranked[0].page_content, ranked.weight) for ranked in ranked_lists]
[('a', 2.0), ('a', 1.0), ('b', 2.0), ('b', 1.0)]
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from contextvars import copy_context
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForChainRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableBinding,
    RunnableConfig,
    RunnableSerializable,
    ensure_config,
)
from langchain_core.runnables.config import ContextThreadPoolExecutor, patch_config
from pydantic import ConfigDict, Field, field_validator, model_validator

from rag_fusion_chain.fusion import BaseFusion, RankedList, ReciprocalRankFusion, validate_weights
from rag_fusion_chain.queries import validate_count

QueriesInput = str | Sequence[str]
OnError = Literal["warn", "raise"]
Outcome = list[Document] | BaseException
"""What one (query, retriever) pair gave: its documents, or the error it raised."""

T = TypeVar("T")

DEFAULT_K = 5
"""Documents a :class:`FusionRetriever` returns unless ``k`` is given at invoke time."""


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetrievalFailure:
    """One (query, retriever) pair that raised or timed out: kept in the output, never swallowed.

    >>> RetrievalFailure(source="bm25", query="solar", error="TimeoutError: no answer within 2 s")
    RetrievalFailure(source='bm25', query='solar', error='TimeoutError: no answer within 2 s')
    """

    source: str
    query: str
    error: str


class RetrievalResults(list):  # type: ignore[type-arg]
    """The fan-out output: :class:`RankedList` s, query-major then retriever, plus ``failures``.

    A plain list everywhere else, so every fusion runnable takes it as is.

    >>> results = RetrievalResults([RankedList([Document("a")], source="bm25")])
    >>> len(results), results.failures
    (1, [])
    """

    def __init__(
        self, ranked_lists: Iterable[RankedList] = (), *, failures: Iterable[RetrievalFailure] = ()
    ) -> None:
        super().__init__(ranked_lists)
        self.failures: list[RetrievalFailure] = list(failures)

    def __repr__(self) -> str:
        return f"RetrievalResults({list.__repr__(self)}, failures={self.failures!r})"


class RetrievalError(RuntimeError):
    """Raised when no retriever returned anything: there is nothing left to fuse."""

    def __init__(self, failures: Sequence[RetrievalFailure]) -> None:
        self.failures = list(failures)
        details = "; ".join(f"{failure.source} ({failure.error})" for failure in self.failures)
        super().__init__(f"every retriever failed: {details}")


# --------------------------------------------------------------------------------------------
# Small pure helpers
# --------------------------------------------------------------------------------------------


def as_query_list(queries: QueriesInput) -> list[str]:
    """Accept one query or a list of them; refuse other types (TypeError) and blank queries.

    >>> as_query_list("solar power")
    ['solar power']
    """
    if isinstance(queries, str):
        query_list = [queries]
    elif isinstance(queries, Sequence) and all(isinstance(query, str) for query in queries):
        query_list = list(queries)
    else:
        raise TypeError(f"queries must be a str or a list of str, got {type(queries).__name__}")
    for position, query in enumerate(query_list):
        if not query.strip():  # a vector store would answer it with arbitrary documents
            raise ValueError(
                f"queries must not be empty or whitespace: query {position} is {query!r}"
            )
    return query_list


def as_retriever_list(retrievers: Any) -> list[Runnable[Any, Any]]:
    """Accept one retriever (any Runnable from str to documents) or a non-empty list of them."""
    if isinstance(retrievers, Runnable):
        return [retrievers]
    if isinstance(retrievers, (str, bytes)) or not isinstance(retrievers, Iterable):
        raise TypeError(
            f"retrievers must be a retriever or a list of retrievers, got {type(retrievers).__name__}"
        )
    retriever_list = list(retrievers)
    if not retriever_list:
        raise ValueError("retrievers must not be empty")
    for position, retriever in enumerate(retriever_list):
        if not isinstance(retriever, Runnable):
            raise TypeError(
                f"retrievers[{position}] must be a retriever (a Runnable), "
                f"got {type(retriever).__name__}"
            )
    return retriever_list


def source_names(retrievers: Sequence[Runnable[Any, Any]]) -> list[str]:
    """Name each retriever for warnings and ``RankedList.source``; repeated names get ``[i]``.

    >>> from langchain_core.runnables import RunnableLambda
    >>> source_names([RunnableLambda(len, name="bm25"), RunnableLambda(len, name="bm25")])
    ['bm25[0]', 'bm25[1]']
    """
    names = [retriever.get_name() for retriever in retrievers]
    repeated = {name for name in names if names.count(name) > 1}
    return [f"{name}[{index}]" if name in repeated else name for index, name in enumerate(names)]


def split_concurrency(retriever_count: int, max_concurrency: int | None) -> tuple[int, int | None]:
    """Split ``max_concurrency`` into (retrievers at once, queries at once per retriever).

    Their product never exceeds ``max_concurrency``, so the bound holds over all pairs while each
    retriever still gets its whole query list in one ``batch`` call.

    >>> split_concurrency(3, 2), split_concurrency(2, 4), split_concurrency(2, None)
    ((2, 1), (2, 2), (2, None))
    """
    if max_concurrency is None:
        return retriever_count, None
    at_once = max(1, min(retriever_count, max_concurrency))
    return at_once, max(1, max_concurrency // at_once)


def accepts_k(retriever: Runnable[Any, Any]) -> bool:
    """True for a ``BaseRetriever`` (possibly bound): it takes ``k`` as an invoke keyword safely.

    ``BaseRetriever.invoke`` hands extra keywords only to retrievers whose
    ``_get_relevant_documents`` declares them (``VectorStoreRetriever`` does) and drops them
    otherwise; any other Runnable could fail on an unexpected keyword.
    """
    while isinstance(retriever, RunnableBinding):
        retriever = retriever.bound
    return isinstance(retriever, BaseRetriever)


def describe_error(error: BaseException) -> str:
    """``"TypeName: message"``, the form failures are recorded in."""
    return f"{type(error).__name__}: {error}"


def call_with_timeout(function: Callable[[], T], timeout: float | None) -> T:
    """Call ``function``; with a timeout, in a daemon thread, raising TimeoutError when it is late.

    A thread cannot be stopped: a late call runs on in the background and its result is dropped.
    """
    if timeout is None:
        return function()
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(function())
        except BaseException as error:  # handed to the waiting caller
            future.set_exception(error)

    threading.Thread(target=copy_context().run, args=(run,), daemon=True).start()
    done, _ = concurrent.futures.wait([future], timeout=timeout)
    if not done:
        raise TimeoutError(f"no answer within {timeout} s")
    return future.result()


def _checked_documents(result: Any) -> Outcome:
    if isinstance(result, BaseException):
        return result
    if isinstance(result, (list, tuple)) and all(isinstance(item, Document) for item in result):
        return list(result)
    return TypeError(f"a retriever must return a list of Documents, got {type(result).__name__}")


# --------------------------------------------------------------------------------------------
# MultiRetriever
# --------------------------------------------------------------------------------------------


class MultiRetriever(RunnableSerializable[QueriesInput, list[list[Document]]]):
    """Map queries over several retrievers concurrently; output ranked lists ready for fusion.

    Each retriever gets the whole query list in one ``batch`` call (so a retriever that embeds all
    queries at once keeps doing so), the retrievers run side by side, and the product of both is
    bounded by ``max_concurrency`` from the config. The output is query-major, then retriever,
    whatever finishes first; each :class:`RankedList` carries its retriever's weight, which fusion
    reads when it is given no explicit weights.

    ``k`` asks each retriever for that many documents (passed as the ``k`` invoke keyword to
    ``BaseRetriever`` s, which forward it when their ``_get_relevant_documents`` accepts it, as
    ``VectorStoreRetriever`` does) and cuts every list to ``k``.

    Reliability: a retriever that raises, or exceeds ``timeout`` seconds for its batch, is reported
    with ``warnings.warn`` and recorded in ``output.failures`` while the others are kept
    (``on_error="warn"``); ``on_error="raise"`` raises instead. If nothing succeeded,
    :class:`RetrievalError` is raised.

    >>> # fan_out = MultiRetriever([bm25, vectors], weights=[1.0, 2.0], timeout=5)
    >>> # fused = (fan_out | reciprocal_rank_fusion).invoke(["solar power", "wind power"])
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str | None = "retrieve"
    retrievers: list[Runnable[Any, Any]]
    weights: list[float] | None = None
    """One weight per retriever, carried on its ranked lists; default 1.0 each."""
    k: int | None = None
    """Documents per retriever call; None leaves each retriever's own default."""
    on_error: OnError = "warn"
    timeout: float | None = None
    """Seconds each retriever may take for its whole batch; None waits as long as it takes."""

    def __init__(
        self,
        retrievers: Runnable[Any, Any] | Sequence[Runnable[Any, Any]],
        weights: Sequence[float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            retrievers=as_retriever_list(retrievers),
            weights=None if weights is None else list(weights),
            **kwargs,
        )

    @model_validator(mode="after")
    def _check_settings(self) -> MultiRetriever:
        if self.weights is not None:
            validate_weights(self.weights)
            if len(self.weights) != len(self.retrievers):
                raise ValueError(
                    f"weights: got {len(self.weights)} weights for "
                    f"{len(self.retrievers)} retrievers; give one weight per retriever"
                )
        if self.k is not None:
            validate_count("k", self.k)
        if self.timeout is not None and not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {self.timeout}")
        return self

    # ---- one retriever -----------------------------------------------------------------------

    def _search_keywords(self, retriever: Runnable[Any, Any]) -> dict[str, Any]:
        return {"k": self.k} if self.k is not None and accepts_k(retriever) else {}

    def _outcomes(self, index: int, queries: list[str], config: RunnableConfig) -> list[Outcome]:
        retriever = self.retrievers[index]
        keywords = self._search_keywords(retriever)
        try:
            results = call_with_timeout(
                lambda: retriever.batch(queries, config, return_exceptions=True, **keywords),
                self.timeout,
            )
        except Exception as error:  # recorded per query by _collect
            return [error] * len(queries)
        return [_checked_documents(result) for result in results]

    async def _aoutcomes(
        self, index: int, queries: list[str], config: RunnableConfig
    ) -> list[Outcome]:
        retriever = self.retrievers[index]
        keywords = self._search_keywords(retriever)
        try:
            results = await asyncio.wait_for(
                retriever.abatch(queries, config, return_exceptions=True, **keywords),
                self.timeout,
            )
        except asyncio.TimeoutError:
            return [TimeoutError(f"no answer within {self.timeout} s")] * len(queries)
        except Exception as error:  # recorded per query by _collect
            return [error] * len(queries)
        return [_checked_documents(result) for result in results]

    # ---- all retrievers ----------------------------------------------------------------------

    def _collect(self, queries: list[str], outcomes: list[list[Outcome]]) -> RetrievalResults:
        """Order outcomes query-major, then retriever; record, warn about or raise failures."""
        names = source_names(self.retrievers)
        weights = self.weights or [1.0] * len(self.retrievers)
        ranked_lists: list[RankedList] = []
        failures: list[RetrievalFailure] = []
        errors: list[BaseException] = []
        for query_index, query in enumerate(queries):
            for index, retriever_outcomes in enumerate(outcomes):
                outcome = retriever_outcomes[query_index]
                if isinstance(outcome, BaseException):
                    errors.append(outcome)
                    failures.append(RetrievalFailure(names[index], query, describe_error(outcome)))
                else:
                    documents = outcome if self.k is None else outcome[: self.k]
                    ranked_lists.append(
                        RankedList(
                            documents, weight=weights[index], query=query, source=names[index]
                        )
                    )
        if errors and self.on_error == "raise":
            raise errors[0]
        if errors and not ranked_lists:
            raise RetrievalError(failures) from errors[0]
        _warn_about(failures, len(queries))
        return RetrievalResults(ranked_lists, failures=failures)

    def _retrieve(
        self, value: QueriesInput, run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> RetrievalResults:
        queries = as_query_list(value)
        if not queries:
            return RetrievalResults()
        at_once, per_retriever = split_concurrency(
            len(self.retrievers), config.get("max_concurrency")
        )
        child = patch_config(
            config, callbacks=run_manager.get_child(), max_concurrency=per_retriever
        )
        with ContextThreadPoolExecutor(max_workers=at_once) as executor:
            outcomes = list(
                executor.map(
                    lambda index: self._outcomes(index, queries, child),
                    range(len(self.retrievers)),
                )
            )
        return self._collect(queries, outcomes)

    async def _aretrieve(
        self,
        value: QueriesInput,
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> RetrievalResults:
        queries = as_query_list(value)
        if not queries:
            return RetrievalResults()
        at_once, per_retriever = split_concurrency(
            len(self.retrievers), config.get("max_concurrency")
        )
        child = patch_config(
            config, callbacks=run_manager.get_child(), max_concurrency=per_retriever
        )
        semaphore = asyncio.Semaphore(at_once)

        async def bounded(index: int) -> list[Outcome]:
            async with semaphore:
                return await self._aoutcomes(index, queries, child)

        outcomes = await asyncio.gather(*(bounded(index) for index in range(len(self.retrievers))))
        return self._collect(queries, list(outcomes))

    def invoke(
        self, input: QueriesInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> RetrievalResults:
        return self._call_with_config(self._retrieve, input, config)

    async def ainvoke(
        self, input: QueriesInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> RetrievalResults:
        return await self._acall_with_config(self._aretrieve, input, config)


def _warn_about(failures: list[RetrievalFailure], query_count: int) -> None:
    """One warning per failing retriever, naming it, with its first error."""
    by_source: dict[str, list[RetrievalFailure]] = {}
    for failure in failures:
        by_source.setdefault(failure.source, []).append(failure)
    for source, source_failures in by_source.items():
        warnings.warn(
            f"retriever {source!r} failed for {len(source_failures)} of {query_count} queries "
            f"({source_failures[0].error}); fusing the results of the others",
            stacklevel=4,
        )


# --------------------------------------------------------------------------------------------
# FusionRetriever
# --------------------------------------------------------------------------------------------


class FusionRetriever(BaseRetriever):
    """Query generation, fan-out and fusion as one ``BaseRetriever``: use it where a retriever goes.

    ``k`` is the number of fused documents returned, overridable per call like any LangChain
    retriever (``retriever.invoke(question, k=3)``); documents per underlying retriever call are
    set on the fan-out (``MultiRetriever(..., k=20)``). Without a ``query_generator`` the question
    itself is the only query, which makes this a hybrid retriever over ``retrievers``.

    >>> # retriever = FusionRetriever(
    >>> #     retrievers=[bm25, vectors], query_generator=queries.rag_fusion(llm, n=4), k=5)
    >>> # retriever.invoke("How do heat pumps work?", k=3)  # three fused Documents
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retrievers: MultiRetriever
    """The retrievers to fan out over: a list (or one) of them, or a configured MultiRetriever."""
    query_generator: Runnable[Any, Any] | None = None
    """Question to ``list[str]`` (or to one ``str``), e.g. ``queries.rag_fusion(llm)``."""
    fusion: BaseFusion = Field(default_factory=ReciprocalRankFusion)
    k: int = DEFAULT_K

    @field_validator("retrievers", mode="before")
    @classmethod
    def _as_multi_retriever(cls, value: Any) -> MultiRetriever:
        return value if isinstance(value, MultiRetriever) else MultiRetriever(value)

    @field_validator("fusion")
    @classmethod
    def _check_fusion(cls, fusion: BaseFusion) -> BaseFusion:
        if fusion.with_scores:
            raise ValueError(
                "fusion must return Documents (with_scores=False); the fused score is in "
                "metadata['fusion_score']"
            )
        return fusion

    @field_validator("k")
    @classmethod
    def _check_k(cls, k: int) -> int:
        return validate_count("k", k)

    def invoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        # BaseRetriever hands its run only a run manager; pass the config on for max_concurrency,
        # configurable fields and tags.
        return super().invoke(input, config, run_config=ensure_config(config), **kwargs)

    async def ainvoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        return await super().ainvoke(input, config, run_config=ensure_config(config), **kwargs)

    def _fusion_keeping(self, k: int | None) -> BaseFusion:
        top_n = self.k if k is None else validate_count("k", k)
        return self.fusion.model_copy(update={"top_n": top_n})

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        run_config: RunnableConfig | None = None,
    ) -> list[Document]:
        config = patch_config(run_config, callbacks=run_manager.get_child())
        queries = self.query_generator.invoke(query, config) if self.query_generator else query
        ranked_lists = self.retrievers.invoke(queries, config)
        return self._fusion_keeping(k).invoke(ranked_lists, config)  # type: ignore[return-value]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        run_config: RunnableConfig | None = None,
    ) -> list[Document]:
        config = patch_config(run_config, callbacks=run_manager.get_child())
        queries = (
            await self.query_generator.ainvoke(query, config) if self.query_generator else query
        )
        ranked_lists = await self.retrievers.ainvoke(queries, config)
        return await self._fusion_keeping(k).ainvoke(ranked_lists, config)  # type: ignore[return-value]


__all__ = [
    "DEFAULT_K",
    "FusionRetriever",
    "MultiRetriever",
    "RetrievalError",
    "RetrievalFailure",
    "RetrievalResults",
    "accepts_k",
    "as_query_list",
    "as_retriever_list",
    "call_with_timeout",
    "describe_error",
    "source_names",
    "split_concurrency",
]
