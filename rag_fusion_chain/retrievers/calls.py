"""Calling retrievers: accepted inputs, source names, concurrency split, which queries a call
takes (:class:`Waiting`, :class:`Batch`), and the time bound.

Every retrieval call of the fan-out is bounded in time: ``DEFAULT_TIMEOUT`` seconds unless the
user sets ``MultiRetriever(timeout=...)`` (``None`` to wait without a bound). A late call is
reported as a failure while the other retrievers' results are still fused.

>>> as_query_list("solar power")
['solar power']
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextvars import copy_context
from typing import Any, Generic, TypeVar

from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableBinding

T = TypeVar("T")

QueriesInput = str | Sequence[str]

DEFAULT_TIMEOUT = 30.0
"""Seconds one retrieval call (one retriever, one batch of queries) may take by default."""


def as_query_list(queries: QueriesInput, *, first_position: int = 0) -> list[str]:
    """Accept one query or a list of them; refuse other types (TypeError) and blank queries.

    ``first_position`` numbers the queries in errors when they continue a stream.
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
    """Split ``max_concurrency`` into (batch calls at once, queries at once within a call).

    Their product never exceeds ``max_concurrency``, so the bound holds over all (query,
    retriever) pairs while a call still gets its whole batch of queries.

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


def check_timeout(timeout: float | None) -> float | None:
    """Raise ValueError unless ``timeout`` is None or a positive finite number of seconds."""
    if timeout is not None and not (
        isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0
    ):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout}")
    return timeout


def late(timeout: float) -> TimeoutError:
    """The error a call that outlived ``timeout`` is recorded with."""
    return TimeoutError(f"no answer within {timeout} s")


class Waiting:
    """The queries (by position) waiting for one retriever's next call.

    A query posted to an empty ``Waiting`` needs a new call; one posted while a call is started
    but has not yet taken its queries simply joins that call. Nothing waits for a call in flight:
    a call takes the waiting queries the moment it starts, and later ones start the next call.

    >>> waiting = Waiting()
    >>> waiting.post([0]), waiting.post([1, 2])  # a new call for 0; 1 and 2 join it
    (True, False)
    >>> batch = Batch(waiting)
    >>> batch.positions(), waiting.post([3])  # the call took 0-2; 3 needs a new call
    ([0, 1, 2], True)
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.positions: list[int] = []

    def post(self, positions: Sequence[int]) -> bool:
        """Add ``positions``; True when no started call will take them (start one)."""
        with self.lock:
            needs_call = not self.positions and bool(positions)
            self.positions.extend(positions)
            return needs_call


class Batch:
    """The queries one call searches: fixed ones, or those waiting when it first asks.

    Asked again (by the collector, say, after the call was late), it answers the same positions.

    >>> Batch([4]).positions()
    [4]
    """

    def __init__(self, source: Waiting | Sequence[int]) -> None:
        self._waiting: Waiting | None = None
        self._positions: list[int] | None = None
        if isinstance(source, Waiting):
            self._waiting = source
        else:
            self._positions = list(source)

    def positions(self) -> list[int]:
        """The positions searched by this call, taken from its ``Waiting`` on the first ask."""
        if self._waiting is None:
            assert self._positions is not None
            return self._positions
        with self._waiting.lock:
            if self._positions is None:
                self._positions, self._waiting.positions = self._waiting.positions, []
            return self._positions


class TimedCall(Generic[T]):
    """``function()`` running in a thread of its own, started at once, awaited with a time bound.

    The thread is started with ``_thread.start_new_thread``: no start-up handshake (about a
    millisecond per call on a busy machine with ``threading.Thread``) and never joined at exit,
    so a hung retriever cannot keep the process alive. With ``slots``, the call first waits for
    a slot; its time bound counts from when it got one, and a late call gives its slot back.

    >>> TimedCall(lambda: 42).result(timeout=5)
    42
    """

    def __init__(self, function: Callable[[], T], slots: threading.Semaphore | None = None) -> None:
        self.future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self.started: float | None = None
        self._slots = slots
        self._lock = threading.Lock()
        self._holds_slot = False
        _thread.start_new_thread(copy_context().run, (self._run, function))

    def _run(self, function: Callable[[], T]) -> None:
        if self._slots is not None:
            self._slots.acquire()
            self._holds_slot = True
        self.started = time.monotonic()
        try:
            self.future.set_running_or_notify_cancel()
            try:
                self.future.set_result(function())
            except BaseException as error:  # handed to the waiting caller
                self.future.set_exception(error)
        finally:
            self._release()

    def _release(self) -> None:
        with self._lock:
            if self._holds_slot and self._slots is not None:
                self._holds_slot = False
                self._slots.release()

    def result(self, timeout: float | None) -> T:
        """The call's result or error; TimeoutError once it has run ``timeout`` seconds."""
        if timeout is None:
            return self.future.result()
        while True:
            started = self.started
            remaining = timeout if started is None else started + timeout - time.monotonic()
            done, _ = concurrent.futures.wait([self.future], timeout=max(0.0, remaining))
            if done:
                return self.future.result()
            if self.started is not None and time.monotonic() >= self.started + timeout:
                self._release()  # the thread runs on; its slot goes to the next call
                raise late(timeout)


def call_with_timeout(function: Callable[[], T], timeout: float | None) -> T:
    """Call ``function``; with a timeout, in a thread of its own, raising TimeoutError when late.

    A thread cannot be stopped: a late call runs on in the background and its result is dropped.
    """
    if timeout is None:
        return function()
    return TimedCall(function).result(timeout)


async def acall_with_timeout(call: Awaitable[T], timeout: float | None) -> T:
    """Async :func:`call_with_timeout`: the late call is cancelled."""
    try:
        return await asyncio.wait_for(call, timeout)
    except asyncio.TimeoutError:
        assert timeout is not None
        raise late(timeout) from None


__all__ = [
    "DEFAULT_TIMEOUT",
    "Batch",
    "QueriesInput",
    "TimedCall",
    "Waiting",
    "accepts_k",
    "acall_with_timeout",
    "as_query_list",
    "as_retriever_list",
    "call_with_timeout",
    "check_timeout",
    "source_names",
    "split_concurrency",
]
