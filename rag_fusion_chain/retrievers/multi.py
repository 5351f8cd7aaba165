"""MultiRetriever: search several queries over several retrievers at once; output ready for fusion.

Dispatch rule: a query is sent to every retriever the moment it is known, whatever else is in
flight for that retriever; nothing waits for a busy retriever to finish. A retriever that batches
natively (one embedding request for several queries: the kit's ``VectorRetriever`` and
``BM25Retriever``, or any retriever overriding ``batch``) gets, in one call, the queries that are
waiting together when that call starts: a list given to ``invoke``, one streamed chunk carrying
several lines, or lines that arrived while the call's thread was still starting (an instant model
writes them all in that time). Other retrievers get one call per query. ``max_concurrency`` (from
the config) bounds the calls in flight; queries waiting for a free slot go together too.

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
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForChainRun, CallbackManagerForChainRun
from langchain_core.documents import Document
from langchain_core.runnables import (
    Runnable,
    RunnableBinding,
    RunnableConfig,
    RunnableSerializable,
)
from langchain_core.runnables.config import patch_config
from pydantic import ConfigDict, model_validator

from rag_fusion_chain.fusion import RankedList, validate_weights
from rag_fusion_chain.retrievers.calls import (
    DEFAULT_TIMEOUT,
    Batch,
    QueriesInput,
    TimedCall,
    Waiting,
    acall_with_timeout,
    accepts_k,
    as_retriever_list,
    check_timeout,
    source_names,
)
from rag_fusion_chain.retrievers.results import (
    Outcome,
    RetrievalError,
    RetrievalFailure,
    RetrievalResults,
    checked_documents,
    describe_error,
    warn_about,
)
from rag_fusion_chain.retrievers.streams import QueryStream, aadd_up, add_up, one
from rag_fusion_chain.validation import validate_count

OnError = Literal["warn", "raise"]

Call = tuple[int, Batch]
"""One retriever call: the retriever's index and the queries (positions) it searches."""


def batches_natively(retriever: Runnable[Any, Any]) -> bool:
    """True when ``retriever.batch`` is its own (one request for several queries), not
    ``Runnable.batch`` (which only runs ``invoke`` once per query)."""
    while isinstance(retriever, RunnableBinding):
        retriever = retriever.bound
    return type(retriever).batch is not Runnable.batch


class MultiRetriever(RunnableSerializable[QueriesInput, list[list[Document]]]):
    """Map queries over several retrievers concurrently; output ranked lists ready for fusion.

    The output is query-major, then retriever, whatever finishes first; each :class:`RankedList`
    carries its retriever's weight, which fusion reads when it is given no explicit weights.

    ``k`` asks each retriever for that many documents (passed as the ``k`` invoke keyword to
    ``BaseRetriever`` s, which forward it when their ``_get_relevant_documents`` accepts it, as
    ``VectorStoreRetriever`` does) and cuts every list to ``k``.

    Reliability: each retriever call is bounded by ``timeout`` seconds (30 by default; None waits
    without a bound). A retriever that raises or is late is reported with ``warnings.warn`` and
    recorded in ``output.failures`` while the others are kept (``on_error="warn"``);
    ``on_error="raise"`` raises instead. If nothing succeeded, :class:`RetrievalError` is raised.

    Streaming (:meth:`transform`): fed a stream of queries, as when ``generator | fan_out`` is
    streamed, each chunk's queries are dispatched on arrival (see the module docstring); the
    output is that of ``invoke`` of all the queries: one chunk, in arrival order.

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
    timeout: float | None = DEFAULT_TIMEOUT
    """Seconds each retriever call may take; None waits as long as it takes."""

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
        check_timeout(self.timeout)
        return self

    # ---- planning calls ----------------------------------------------------------------------

    def _calls(self, waiting: list[Waiting | None], first: int, count: int) -> list[Call]:
        """The calls to start for queries ``first`` .. ``first + count - 1``: for a retriever that
        batches natively, one unless a started call will take them (``waiting[index]``); for
        other retrievers (``None``), one per query."""
        positions = range(first, first + count)
        calls: list[Call] = []
        for index, waiting_queries in enumerate(waiting):
            if waiting_queries is None:
                calls.extend((index, Batch([position])) for position in positions)
            elif waiting_queries.post(positions):
                calls.append((index, Batch(waiting_queries)))
        return calls

    def _waiting(self) -> list[Waiting | None]:
        """Per retriever, where queries wait for its next call; None if it takes one per call."""
        return [Waiting() if batches_natively(retriever) else None for retriever in self.retrievers]

    def _search_keywords(self, retriever: Runnable[Any, Any]) -> dict[str, Any]:
        return {"k": self.k} if self.k is not None and accepts_k(retriever) else {}

    # ---- one call ----------------------------------------------------------------------------

    def _search(
        self, index: int, batch: Batch, queries: list[str], config: RunnableConfig
    ) -> list[Outcome]:
        """One retriever call (in its own thread: see :meth:`_retrieve_stream`)."""
        retriever = self.retrievers[index]
        searched = [queries[position] for position in batch.positions()]
        results = retriever.batch(
            searched, config, return_exceptions=True, **self._search_keywords(retriever)
        )
        return [checked_documents(result) for result in results]

    def _outcomes(self, call: Call, timed_call: TimedCall[list[Outcome]]) -> list[Outcome]:
        """What a call gave, once it ends or is late; its error for each of its queries."""
        try:
            return timed_call.result(self.timeout)
        except Exception as error:  # recorded per query by _collect
            return [error] * len(call[1].positions())

    async def _aoutcomes(
        self, index: int, batch: Batch, queries: list[str], config: RunnableConfig
    ) -> list[Outcome]:
        retriever = self.retrievers[index]
        searched = [queries[position] for position in batch.positions()]
        keywords = self._search_keywords(retriever)
        try:
            results = await acall_with_timeout(
                retriever.abatch(searched, config, return_exceptions=True, **keywords),
                self.timeout,
            )
        except Exception as error:  # recorded per query by _collect
            return [error] * len(searched)
        return [checked_documents(result) for result in results]

    # ---- all calls ---------------------------------------------------------------------------

    def _collect(
        self, queries: list[str], finished: list[tuple[Call, list[Outcome]]]
    ) -> RetrievalResults:
        """Order outcomes query-major, then retriever; record, warn about or raise failures."""
        table: list[dict[int, Outcome]] = [{} for _ in self.retrievers]
        for (index, batch), outcomes in finished:
            table[index].update(zip(batch.positions(), outcomes, strict=True))
        names = source_names(self.retrievers)
        weights = self.weights or [1.0] * len(self.retrievers)
        ranked_lists: list[RankedList] = []
        failures: list[RetrievalFailure] = []
        errors: list[BaseException] = []
        for position, query in enumerate(queries):
            for index, outcomes_by_position in enumerate(table):
                outcome = outcomes_by_position[position]
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
        warn_about(failures, len(queries))
        return RetrievalResults(ranked_lists, failures=failures, queries=queries)

    def _child_config(
        self,
        run_manager: CallbackManagerForChainRun | AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> tuple[int | None, RunnableConfig]:
        """(calls in flight at once, None when the config sets no bound; the calls' config).

        With ``max_concurrency`` set, that many calls run at once and each searches its queries
        one after another, so the bound holds over all (query, retriever) pairs.
        """
        max_concurrency = config.get("max_concurrency")
        child = patch_config(
            config,
            callbacks=run_manager.get_child(),
            max_concurrency=None if max_concurrency is None else 1,
        )
        return max_concurrency, child

    def _retrieve_stream(
        self,
        chunks: Iterator[QueriesInput],
        run_manager: CallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> Iterator[RetrievalResults]:
        """Dispatch each chunk's queries on arrival; yield the results once the input has ended.

        Every call runs in a thread of its own (:class:`TimedCall`), started at once; with
        ``max_concurrency`` it first waits for one of that many slots.
        """
        at_once, child = self._child_config(run_manager, config)
        slots = None if at_once is None else threading.Semaphore(at_once)
        reader, queries = QueryStream(), cast(list[str], [])
        waiting = self._waiting()
        pending: list[tuple[Call, TimedCall[list[Outcome]]]] = []

        def dispatch(new_queries: list[str]) -> None:
            first = len(queries)
            queries.extend(new_queries)
            for call in self._calls(waiting, first, len(new_queries)):
                search = functools.partial(self._search, *call, queries, child)
                pending.append((call, TimedCall(search, slots)))

        try:
            for chunk in chunks:
                dispatch(reader.feed(chunk))
            dispatch(reader.finish())
        except BaseException:
            for _, timed_call in pending:  # the calls in flight end (or are late) first
                concurrent.futures.wait([timed_call.future], timeout=self.timeout)
            raise
        finished = [(call, self._outcomes(call, timed_call)) for call, timed_call in pending]
        yield self._collect(queries, finished)

    async def _aretrieve_stream(
        self,
        chunks: AsyncIterator[QueriesInput],
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> AsyncIterator[RetrievalResults]:
        """Async :meth:`_retrieve_stream`: each call is a task."""
        at_once, child = self._child_config(run_manager, config)
        slots: AbstractAsyncContextManager[Any] = (
            nullcontext() if at_once is None else asyncio.Semaphore(at_once)
        )
        reader, queries = QueryStream(), cast(list[str], [])
        waiting = self._waiting()
        pending: list[tuple[Call, asyncio.Task[list[Outcome]]]] = []

        async def bounded(index: int, batch: Batch) -> list[Outcome]:
            async with slots:
                return await self._aoutcomes(index, batch, queries, child)

        def dispatch(new_queries: list[str]) -> None:
            first = len(queries)
            queries.extend(new_queries)
            for call in self._calls(waiting, first, len(new_queries)):
                pending.append((call, asyncio.create_task(bounded(*call))))

        try:
            async for chunk in chunks:
                dispatch(reader.feed(chunk))
            dispatch(reader.finish())
            results = await asyncio.gather(*(task for _, task in pending))
        finally:
            for _, task in pending:
                task.cancel()  # only those still running: the input or a call failed
        yield self._collect(
            queries,
            [(call, outcomes) for (call, _), outcomes in zip(pending, results, strict=True)],
        )

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
        return await aadd_up(self._aretrieve_stream(one(value), run_manager, config))

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
        while the model writes the next. The one chunk yielded, a :class:`RetrievalResults`,
        equals ``invoke`` of the queries.
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


__all__ = ["MultiRetriever", "batches_natively"]
