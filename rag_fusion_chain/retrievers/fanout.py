"""Fan-out: run several queries over several retrievers at once, and fuse them as one retriever.

:class:`MultiRetriever` maps queries over retrievers, every (query, retriever) pair concurrently,
bounded by ``max_concurrency``; its output feeds any fusion runnable. :class:`FusionRetriever` wraps
query generation, fan-out and fusion in a ``BaseRetriever``, to drop in wherever a retriever goes.

Streaming: a ``MultiRetriever`` fed a stream of queries (``generator | MultiRetriever(...)``,
streamed) searches each query as soon as it arrives, while the model is still writing the next
ones; queries that arrive while a retriever is busy go together in its next batch. LangChain
invokes a sequence step after step, so :class:`StreamingInvoke` gives ``invoke`` the streamed
route too; :class:`FusionRetriever` and the ready-made chains take it on their own.

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
import functools
import math
import operator
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from contextvars import copy_context
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

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
from langchain_core.runnables.utils import Input, Output
from pydantic import ConfigDict, Field, field_validator, model_validator

from rag_fusion_chain.fusion import BaseFusion, RankedList, ReciprocalRankFusion, validate_weights
from rag_fusion_chain.validation import validate_count

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
    """The fan-out output: :class:`RankedList` s, query-major then retriever, plus ``failures``
    and the ``queries`` searched, in order.

    A plain list everywhere else, so every fusion runnable takes it as is.

    >>> results = RetrievalResults([RankedList([Document("a")], source="bm25")], queries=["a"])
    >>> len(results), results.failures, results.queries
    (1, [], ['a'])
    """

    def __init__(
        self,
        ranked_lists: Iterable[RankedList] = (),
        *,
        failures: Iterable[RetrievalFailure] = (),
        queries: Iterable[str] = (),
    ) -> None:
        super().__init__(ranked_lists)
        self.failures: list[RetrievalFailure] = list(failures)
        self.queries: list[str] = list(queries)

    def __repr__(self) -> str:
        return (
            f"RetrievalResults({list.__repr__(self)}, failures={self.failures!r}, "
            f"queries={self.queries!r})"
        )


class RetrievalError(RuntimeError):
    """Raised when no retriever returned anything: there is nothing left to fuse."""

    def __init__(self, failures: Sequence[RetrievalFailure]) -> None:
        self.failures = list(failures)
        details = "; ".join(f"{failure.source} ({failure.error})" for failure in self.failures)
        super().__init__(f"every retriever failed: {details}")


# --------------------------------------------------------------------------------------------
# Small pure helpers
# --------------------------------------------------------------------------------------------


def as_query_list(queries: QueriesInput, *, first_position: int = 0) -> list[str]:
    """Accept one query or a list of them; refuse other types (TypeError) and blank queries.

    ``first_position`` numbers the queries in errors when they continue a stream.

    >>> as_query_list("solar power")
    ['solar power']
    """
    if isinstance(queries, str):
        query_list = [queries]
    elif isinstance(queries, Sequence) and all(isinstance(query, str) for query in queries):
        query_list = list(queries)
    else:
        raise TypeError(f"queries must be a str or a list of str, got {type(queries).__name__}")
    for position, query in enumerate(query_list, first_position):
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


def add_up(chunks: Iterable[T]) -> T:
    """The chunks of a stream added up as LangChain adds them; a single chunk is returned as is.

    >>> add_up([["solar"], ["wind"]])
    ['solar', 'wind']
    """
    return functools.reduce(operator.add, chunks)


async def aadd_up(chunks: AsyncIterator[T]) -> T:
    """Async :func:`add_up`."""
    return add_up([chunk async for chunk in chunks])


async def _one(value: T) -> AsyncIterator[T]:
    """An async stream of the single chunk ``value``."""
    yield value


# --------------------------------------------------------------------------------------------
# Streamed input
# --------------------------------------------------------------------------------------------


class _QueryStream:
    """Reads the chunks of a query stream into complete queries.

    Every item of a list chunk is a complete query, returned at once. ``str`` chunks are pieces of
    one query (LangChain adds chunks up: ``"solar " + "power"``), complete when the stream ends.
    """

    def __init__(self) -> None:
        self.count = 0
        self.text: str | None = None

    def feed(self, chunk: QueriesInput) -> list[str]:
        """The complete queries in ``chunk``, validated like invoke's input."""
        if isinstance(chunk, str):
            self.text = chunk if self.text is None else self.text + chunk
            return []
        queries = as_query_list(chunk, first_position=self.count)
        self.count += len(queries)
        return queries

    def finish(self) -> list[str]:
        """The query the ``str`` chunks added up to, if any, once the stream has ended."""
        if self.text is None:
            return []
        if self.count:
            raise TypeError("queries: a stream must send either str chunks or lists, not both")
        return as_query_list(self.text)


class _Lanes:
    """The queries received so far and, per retriever, those waiting for its next batch.

    While the input runs, a retriever searches one batch at a time: queries arriving meanwhile
    wait in its lane and go together in its next batch (micro-batching). Thread-safe: lanes run
    in worker threads.
    """

    def __init__(self, retriever_count: int) -> None:
        self._lock = threading.Lock()
        self.queries: list[str] = []
        self._waiting: list[list[int]] = [[] for _ in range(retriever_count)]
        self._running = [False] * retriever_count
        self._searching = [False] * retriever_count
        self._outcomes: list[dict[int, Outcome]] = [{} for _ in range(retriever_count)]

    def add(self, queries: list[str]) -> list[int]:
        """Queue ``queries`` for every retriever; return the retrievers whose lane must start."""
        with self._lock:
            positions = range(len(self.queries), len(self.queries) + len(queries))
            self.queries.extend(queries)
            starting = []
            for index, waiting in enumerate(self._waiting):
                waiting.extend(positions)
                if positions and not self._running[index]:
                    self._running[index] = True
                    starting.append(index)
            return starting

    def take(self, index: int) -> list[int]:
        """The positions of the queries retriever ``index`` searches next; none ends its lane."""
        with self._lock:
            positions, self._waiting[index] = self._waiting[index], []
            self._running[index] = self._searching[index] = bool(positions)
            return positions

    def stalled(self) -> list[int]:
        """The retrievers whose waiting queries are held back by a batch in flight.

        Once the input has ended no query can join them any more, so a second lane searches them
        at once instead of after that batch.
        """
        with self._lock:
            return [
                index
                for index, waiting in enumerate(self._waiting)
                if waiting and self._searching[index]
            ]

    def queries_at(self, positions: list[int]) -> list[str]:
        with self._lock:
            return [self.queries[position] for position in positions]

    def store(self, index: int, positions: list[int], outcomes: list[Outcome]) -> None:
        with self._lock:
            self._outcomes[index].update(zip(positions, outcomes, strict=True))
            self._searching[index] = False

    def drop_waiting(self) -> None:
        """Forget the queries not yet searched: each lane ends after its current batch."""
        with self._lock:
            for waiting in self._waiting:
                waiting.clear()

    def outcome_table(self) -> list[list[Outcome]]:
        """Outcomes per retriever, each in query order: the shape ``_collect`` takes."""
        with self._lock:
            return [
                [outcomes[position] for position in range(len(self.queries))]
                for outcomes in self._outcomes
            ]


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

    Streaming (:meth:`transform`): fed a stream of queries, as when ``generator | fan_out`` is
    streamed, each query is searched as soon as it arrives; while a retriever's batch is in
    flight, newly arrived queries wait and go together in its next batch (so a retriever that
    embeds a batch in one request makes fewer requests than there are queries). Once the input
    has ended, queries still waiting behind a batch in flight are searched at once, beside it.
    ``timeout`` then applies to each of these batches. The output is that of ``invoke`` of all
    the queries: one chunk, in arrival order, failures handled alike.

    >>> # fan_out = MultiRetriever([bm25, vectors], weights=[1.0, 2.0], timeout=5)
    >>> # fused = (fan_out | reciprocal_rank_fusion).invoke(["solar power", "wind power"])
    >>> # retrieval = StreamingInvoke(queries.rag_fusion(llm) | fan_out | reciprocal_rank_fusion)
    >>> # retrieval.invoke("How do heat pumps work?")  # searching starts with the first query
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
        # mypy gives RunnableSerializable the __init__ of its own pydantic fields only (name);
        # at run time it is pydantic's, which validates this model's fields.
        super().__init__(  # type: ignore[call-arg]
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
        return RetrievalResults(ranked_lists, failures=failures, queries=queries)

    def _child_config(
        self,
        run_manager: CallbackManagerForChainRun | AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> tuple[int | None, RunnableConfig]:
        """(batches in flight at once, None when unbounded; the config of the batch calls)."""
        max_concurrency = config.get("max_concurrency")
        at_once, per_retriever = split_concurrency(len(self.retrievers), max_concurrency)
        child = patch_config(
            config, callbacks=run_manager.get_child(), max_concurrency=per_retriever
        )
        return (None if max_concurrency is None else at_once), child

    def _run_lane(
        self, index: int, lanes: _Lanes, slots: AbstractContextManager[Any], config: RunnableConfig
    ) -> None:
        """Search retriever ``index`` for its waiting queries, a batch at a time, till none wait."""
        while True:
            with slots:
                positions = lanes.take(index)
                if not positions:
                    return
                outcomes = self._outcomes(index, lanes.queries_at(positions), config)
            lanes.store(index, positions, outcomes)

    async def _arun_lane(
        self,
        index: int,
        lanes: _Lanes,
        slots: AbstractAsyncContextManager[Any],
        config: RunnableConfig,
    ) -> None:
        """Async :meth:`_run_lane`."""
        while True:
            async with slots:
                positions = lanes.take(index)
                if not positions:
                    return
                outcomes = await self._aoutcomes(index, lanes.queries_at(positions), config)
            lanes.store(index, positions, outcomes)

    def _retrieve_stream(
        self,
        chunks: Iterator[QueriesInput],
        run_manager: CallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> Iterator[RetrievalResults]:
        """Search each query as it arrives; yield the results once the input has ended.

        Each retriever has a lane (a worker thread) searching a batch at a time, and a second one
        for the queries still waiting when the input ends. ``slots`` lets at most ``at_once``
        batches run together, so ``max_concurrency`` holds over all (query, retriever) pairs.
        """
        at_once, child = self._child_config(run_manager, config)
        lanes, reader = _Lanes(len(self.retrievers)), _QueryStream()
        slots = nullcontext() if at_once is None else threading.Semaphore(at_once)
        with ContextThreadPoolExecutor(max_workers=2 * len(self.retrievers)) as executor:

            def start(indices: list[int]) -> list[concurrent.futures.Future[None]]:
                return [
                    executor.submit(self._run_lane, index, lanes, slots, child) for index in indices
                ]

            lanes_started: list[concurrent.futures.Future[None]] = []
            try:
                for chunk in chunks:
                    lanes_started += start(lanes.add(reader.feed(chunk)))
                lanes_started += start(lanes.add(reader.finish()))
                lanes_started += start(lanes.stalled())
            except BaseException:
                lanes.drop_waiting()
                raise
            for lane in lanes_started:
                lane.result()
        yield self._collect(lanes.queries, lanes.outcome_table())

    async def _aretrieve_stream(
        self,
        chunks: AsyncIterator[QueriesInput],
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> AsyncIterator[RetrievalResults]:
        """Async :meth:`_retrieve_stream`: the lanes are tasks."""
        at_once, child = self._child_config(run_manager, config)
        lanes, reader = _Lanes(len(self.retrievers)), _QueryStream()
        slots = nullcontext() if at_once is None else asyncio.Semaphore(at_once)
        lanes_started: list[asyncio.Task[None]] = []

        def start(indices: list[int]) -> None:
            lanes_started.extend(
                asyncio.create_task(self._arun_lane(index, lanes, slots, child))
                for index in indices
            )

        try:
            async for chunk in chunks:
                start(lanes.add(reader.feed(chunk)))
            start(lanes.add(reader.finish()))
            start(lanes.stalled())
            await asyncio.gather(*lanes_started)
        finally:
            for lane in lanes_started:
                lane.cancel()  # only those still running: the input or a lane failed
        yield self._collect(lanes.queries, lanes.outcome_table())

    def _retrieve(
        self, value: QueriesInput, run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> RetrievalResults:
        return add_up(self._retrieve_stream(iter([value]), run_manager, config))

    async def _aretrieve(
        self,
        value: QueriesInput,
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> RetrievalResults:
        return await aadd_up(self._aretrieve_stream(_one(value), run_manager, config))

    def invoke(
        self, input: QueriesInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> RetrievalResults:
        # _call_with_config returns what self._retrieve returns, but is typed with the class's
        # Output (list[list[Document]]), of which RetrievalResults is a subclass.
        return cast(RetrievalResults, self._call_with_config(self._retrieve, input, config))

    async def ainvoke(
        self, input: QueriesInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> RetrievalResults:
        # As in invoke: _acall_with_config is typed with the class's Output, not _aretrieve's.
        return cast(RetrievalResults, await self._acall_with_config(self._aretrieve, input, config))

    def transform(
        self,
        input: Iterator[QueriesInput],
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Iterator[list[list[Document]]]:
        """Search the queries of a stream as they arrive; yield all results once, at its end.

        LangChain calls this when a sequence holding the fan-out is streamed: in
        ``(generator | MultiRetriever(...)).stream(question)`` each generated query is searched
        while the model writes the next. The one chunk yielded, a :class:`RetrievalResults`, equals
        ``invoke`` of the queries.
        """
        yield from self._transform_stream_with_config(input, self._retrieve_stream, config)

    async def atransform(
        self,
        input: AsyncIterator[QueriesInput],
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[list[list[Document]]]:
        """Async :meth:`transform`."""
        async for results in self._atransform_stream_with_config(
            input, self._aretrieve_stream, config
        ):
            yield results


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
# StreamingInvoke
# --------------------------------------------------------------------------------------------


class StreamingInvoke(RunnableBinding[Input, Output]):
    """Run ``bound`` by streaming it, on ``invoke`` and ``batch`` too, and add the chunks up.

    LangChain invokes a sequence step after step, each step waiting for all of the previous
    one's output; streamed, each step starts on the first chunks of its input. Wrapped, a
    sequence takes the streamed route whichever way it is called: in
    ``StreamingInvoke(generator | MultiRetriever(...) | fusion)`` each query is searched as soon
    as the model has written it, while the result stays that of ``invoke``. It adds no run of
    its own to traces: the runs are those of ``bound`` streamed.

    >>> from langchain_core.runnables import RunnableLambda
    >>> StreamingInvoke(RunnableLambda(lambda question: [question])).invoke("solar power")
    ['solar power']
    """

    def __init__(self, bound: Runnable[Input, Output], **kwargs: Any) -> None:
        super().__init__(bound=bound, **kwargs)

    @classmethod
    def is_lc_serializable(cls) -> bool:
        return False

    def invoke(self, input: Input, config: RunnableConfig | None = None, **kwargs: Any) -> Output:
        return add_up(self.stream(input, config, **kwargs))

    async def ainvoke(
        self, input: Input, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Output:
        return await aadd_up(self.astream(input, config, **kwargs))

    def batch(
        self,
        inputs: list[Input],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Output]:
        """Each input through :meth:`invoke`, concurrently, as ``Runnable.batch`` does."""
        return RunnableSerializable.batch(
            self, inputs, config, return_exceptions=return_exceptions, **kwargs
        )

    async def abatch(
        self,
        inputs: list[Input],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Output]:
        """Each input through :meth:`ainvoke`, concurrently, as ``Runnable.abatch`` does."""
        return await RunnableSerializable.abatch(
            self, inputs, config, return_exceptions=return_exceptions, **kwargs
        )


# --------------------------------------------------------------------------------------------
# FusionRetriever
# --------------------------------------------------------------------------------------------


class FusionRetriever(BaseRetriever):
    """Query generation, fan-out and fusion as one ``BaseRetriever``: use it where a retriever goes.

    The generated queries are streamed into the fan-out: each is searched as soon as the model
    has written it (see :meth:`MultiRetriever.transform`).

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
        query_stream = (
            self.query_generator.stream(query, config) if self.query_generator else iter([query])
        )
        ranked_lists = add_up(self.retrievers.transform(query_stream, config))
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
        query_stream = (
            self.query_generator.astream(query, config) if self.query_generator else _one(query)
        )
        ranked_lists = await aadd_up(self.retrievers.atransform(query_stream, config))
        return await self._fusion_keeping(k).ainvoke(ranked_lists, config)  # type: ignore[return-value]


__all__ = [
    "DEFAULT_K",
    "FusionRetriever",
    "MultiRetriever",
    "RetrievalError",
    "RetrievalFailure",
    "RetrievalResults",
    "StreamingInvoke",
    "aadd_up",
    "accepts_k",
    "add_up",
    "as_query_list",
    "as_retriever_list",
    "call_with_timeout",
    "describe_error",
    "source_names",
    "split_concurrency",
]
