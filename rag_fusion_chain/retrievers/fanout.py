"""The fan-out (README): all the queries in one ``batch`` / ``abatch`` call per retriever, all
retrievers at once within ``max_concurrency``; a retriever that raises or passes its time bound
gives an empty list, a :class:`RetrievalFailure` in the output and a warning."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from threading import Semaphore
from typing import Annotated, Any, Literal

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    ConfigurableFieldSpec,
    Runnable,
    RunnableConfig,
    RunnableSerializable,
)
from langchain_core.runnables.base import RunnableBindingBase
from langchain_core.runnables.config import ContextThreadPoolExecutor, patch_config, run_in_executor
from langchain_core.runnables.configurable import DynamicRunnable
from langchain_core.runnables.utils import gather_with_concurrency, get_unique_config_specs
from langchain_core.vectorstores import VectorStoreRetriever
from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo

from rag_fusion_chain.fusion import BaseFusion, RankedList
from rag_fusion_chain.fusion.inputs import is_document_list, validate_weights
from rag_fusion_chain.fusion.runnables import traced_call
from rag_fusion_chain.validation import counted, redact_credentials

DEFAULT_TIMEOUT = 30.0
"""Seconds one retriever call (all its queries) may take by default; None waits without a bound."""
DEFAULT_K = 5
"""Documents a kit retriever returns unless ``k`` is given."""
POOL_THREADS = 64  # threads a shared pool may start (only as many as calls run at once)


@dataclass(frozen=True)
class RetrievalFailure:
    """One (retriever, query) that raised or was late: kept in the output, never swallowed."""

    source: str
    query: str
    error: str
    _exception: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def exception(self) -> BaseException | None:  # not a field: JSON (LangServe's) leaves it out
        return self._exception


class RetrievalResults(list):  # type: ignore[type-arg]
    """The fan-out output: :class:`RankedList` s (each with its query, its retriever's name and
    weight), query-major then retriever, plus the ``failures`` and the ``queries`` searched."""

    def __init__(
        self,
        ranked_lists: Sequence[RankedList] = (),
        failures: Sequence[RetrievalFailure] = (),
        queries: Sequence[str] = (),
    ) -> None:
        super().__init__(ranked_lists)
        self.failures, self.queries = list(failures), list(queries)

    def __add__(self, other: Any) -> RetrievalResults:  # type: ignore[override]
        return RetrievalResults(
            [*self, *other],
            [*self.failures, *getattr(other, "failures", [])],
            [*self.queries, *getattr(other, "queries", [])],
        )


class RetrievalError(RuntimeError):
    """Raised when every retriever failed: there is nothing left to fuse."""

    def __init__(self, failures: Sequence[RetrievalFailure]) -> None:
        self.failures = list(failures)
        details = "; ".join(f"{failure.source} ({failure.error})" for failure in self.failures)
        super().__init__(f"every retriever failed: {details}")


def _fresh_pools(early_calls: bool = True) -> None:
    """New shared retrieval threads (threads per call cost more than two quick retrievers take),
    after a call passes its time bound: a hung call holds no thread later calls queue behind. With
    ``early_calls`` (import, fork) also :func:`in_background`'s, apart from the retrieval ones."""
    global _executor, _early_calls
    _executor = ContextThreadPoolExecutor(POOL_THREADS)
    if early_calls:
        _early_calls = ContextThreadPoolExecutor(POOL_THREADS)


_executor: ContextThreadPoolExecutor
_early_calls: ContextThreadPoolExecutor
_fresh_pools()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_pools)


def in_background(call: Callable[..., Any], *args: Any) -> Future[Any]:
    """``call(*args)`` (a fan-out call) started in a shared thread; an idle thread takes it as
    soon as it gets the interpreter, so ``cancel()`` tells whether it had begun."""
    return _early_calls.submit(call, *args)


def _result(future: Future[Any], timeout: float | None, queries: list[str]) -> Any:
    """The call's result per query, or its error for each (a TimeoutError after ``timeout`` s)."""
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:  # the builtin TimeoutError from Python 3.11
        _fresh_pools(early_calls=False)  # the late call keeps its thread
        return [TimeoutError(f"no answer within {timeout} s")] * len(queries)
    except Exception as error:
        return [error] * len(queries)


def warn_about(failures: Sequence[RetrievalFailure], queries: int, stacklevel: int) -> None:
    """One warning per failing retriever: for how many of the ``queries`` searched, and why."""
    for source in dict.fromkeys(failure.source for failure in failures):
        failed = [failure for failure in failures if failure.source == source]
        warnings.warn(
            f"retriever {source!r} failed for {len(failed)} of "
            f"{counted(queries, 'query', 'queries')} "
            f"({failed[0].error}); fusing the results of the others",
            stacklevel=stacklevel,
        )


def _gated(gate: Semaphore, call: Callable[[], Any]) -> Any:
    with gate:
        return call()


async def _aresult(
    call: Any, timeout: float | None, queries: list[str], retriever: Runnable[Any, Any]
) -> Any:
    """Async :func:`_result`; a call cut at its bound that may hold a thread: a new default pool."""
    try:
        return await asyncio.wait_for(call, timeout)
    except asyncio.TimeoutError:
        if _holds_a_thread(retriever):
            asyncio.get_running_loop().set_default_executor(ContextThreadPoolExecutor())
        return [TimeoutError(f"no answer within {timeout} s")] * len(queries)
    except Exception as error:
        return [error] * len(queries)


def _as_queries(value: Any) -> list[str]:
    queries = [value] if isinstance(value, str) else value
    if not isinstance(queries, (list, tuple)) or not all(map(isinstance, queries, repeat(str))):
        raise TypeError(f"queries must be a str or a list of str, got {type(value).__name__}")
    if not all(map(str.strip, queries)):  # a vector store would answer a blank query at random
        at = [bool(query.strip()) for query in queries].index(False)
        raise ValueError(f"queries must not be empty or whitespace: query {at} is {queries[at]!r}")
    return list(queries)


def _checked_weights(weights: Any, given: ValidationInfo) -> Any:
    """Given weights (None is not checked), as given: numbers (no bool or str made one), valid,
    and one per retriever."""
    validate_weights(weights)
    retrievers = given.data.get("retrievers")  # None: invalid, reported as such
    if retrievers is not None and len(weights) != len(retrievers):
        raise ValueError(
            f"weights: got {counted(len(weights), 'weight')} for "
            f"{counted(len(retrievers), 'retriever')}; "
            "give one weight per retriever"
        )
    return weights


def _not_documents(found: Any) -> TypeError:
    """The error for a retriever's output that is no list of Documents, saying what it held."""
    items = found if isinstance(found, list | tuple) else ()
    held = [each for each in items if not isinstance(each, Document)]
    got = type(found).__name__ + (f" holding a {type(held[0]).__name__}" if held else "")
    if held and isinstance(held[0], tuple):
        got += " ((Document, score) pairs are similarity_search_with_score's: use as_retriever())"
    return TypeError(f"a retriever must return a list of Documents, got {got}")


def _unbound(retriever: Runnable[Any, Any]) -> Runnable[Any, Any]:
    """The runnable under ``with_config`` / ``with_retry`` / ``configurable_fields`` (its default)."""
    while isinstance(retriever, RunnableBindingBase | DynamicRunnable):
        is_binding = isinstance(retriever, RunnableBindingBase)
        retriever = retriever.bound if is_binding else retriever.default  # type: ignore[union-attr]
    return retriever


def _asked(retriever: Runnable[Any, Any], k: int) -> tuple[Runnable[Any, Any], dict[str, int]]:
    """``retriever`` and the keywords asking it for ``k`` documents: ``k`` to a BaseRetriever
    (under any wrapper), set as its ``k`` field too when it reads no keyword (a copy, rewrapped)."""
    if isinstance(retriever, RunnableBindingBase | DynamicRunnable):
        part = "bound" if isinstance(retriever, RunnableBindingBase) else "default"
        inner, keywords = _asked(getattr(retriever, part), k)
        return retriever.model_copy(update={part: inner}), keywords
    if not isinstance(retriever, BaseRetriever):
        return retriever, {}  # another Runnable may not take it at all: its lists are cut to k
    if "k" in type(retriever).model_fields and not retriever._expects_other_args:
        retriever = retriever.model_copy(update={"k": k})
    return retriever, {"k": k}


def _own_async(retriever: Runnable[Any, Any]) -> bool:
    """Whether ``retriever`` has its own ``_aget_relevant_documents``, not LangChain's fallback
    (the sync method in a thread, which takes no keyword such as ``k``)."""
    fallback = BaseRetriever._aget_relevant_documents
    return getattr(type(_unbound(retriever)), "_aget_relevant_documents", fallback) is not fallback


def _abatch(retriever: Runnable[Any, Any], keywords: dict[str, int], config: RunnableConfig) -> Any:
    """``retriever.abatch``, or its ``batch`` in a thread when it is asked ``keywords`` and has no
    async method of its own (LangChain's fallback would refuse them)."""
    if keywords and not _own_async(retriever):
        return partial(run_in_executor, config, retriever.batch)  # type: ignore[call-arg]
    return retriever.abatch


def _holds_a_thread(retriever: Runnable[Any, Any]) -> bool:
    """Whether ``retriever``'s async call may wait on a thread of the loop's executor: LangChain's
    sync fallback, a vector store's search, the kit's own (``_retrieve_many``); not a lambda's
    ``afunc`` or a retriever's own ``_aget_relevant_documents``, which await on the loop."""
    unbound = _unbound(retriever)
    threaded = isinstance(unbound, VectorStoreRetriever) or hasattr(unbound, "_retrieve_many")
    return threaded or not (_own_async(unbound) or hasattr(unbound, "afunc"))


class MultiRetriever(RunnableSerializable[str | list[str], list[list[Document]]]):
    """Queries (a ``str`` or a list) over several retrievers: a :class:`RetrievalResults` for
    fusion. ``k`` asks each retriever for that many documents (the ``k`` invoke keyword of a
    ``BaseRetriever``) and cuts every list to ``k``. Failures: see the module; ``on_error="raise"``
    raises the first error instead, and :class:`RetrievalError` is raised when every call failed."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    name: str | None = "retrieve"
    retrievers: list[Runnable[Any, Any]] = Field(min_length=1)
    weights: Annotated[list[float], BeforeValidator(_checked_weights)] | None = None
    k: int | None = Field(None, gt=0, strict=True)
    timeout: float | None = Field(DEFAULT_TIMEOUT, gt=0, allow_inf_nan=False, strict=True)
    """Seconds each retriever call may take (None: no bound)."""
    on_error: Literal["warn", "raise", "record"] = "warn"
    """On a failure: warn, raise, or only record it in the output (a caller warns once)."""

    def __init__(self, retrievers: Any, weights: Sequence[float] | None = None, **fields: Any):
        retrievers = [retrievers] if isinstance(retrievers, Runnable) else retrievers
        super().__init__(retrievers=retrievers, weights=weights, **fields)  # type: ignore[call-arg]

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:  # its retrievers', for LangServe
        return get_unique_config_specs(s for each in self.retrievers for s in each.config_specs)

    def _calls(
        self, queries: list[str], config: RunnableConfig, limit: int | None, asynchronous: bool
    ) -> Iterator[Any]:
        """One ``batch`` (or ``abatch``) call per retriever with all the queries, each given its
        share of ``limit`` (the config's ``max_concurrency``): together they stay within it."""
        if limit is not None:
            config = patch_config(config, max_concurrency=max(1, limit // len(self.retrievers)))
        for each in self.retrievers:
            each, keywords = (each, {}) if self.k is None else _asked(each, self.k)
            call = _abatch(each, keywords, config) if asynchronous else each.batch
            yield partial(call, queries, config, return_exceptions=True, **keywords)

    def _collect(self, queries: list[str], outcomes: list[Any]) -> RetrievalResults:
        """Ranked lists query-major, then retriever; failures recorded, warned about or raised."""
        names = [_unbound(each).get_name() for each in self.retrievers]  # configurable: default's
        ranked_lists, failures = [], []
        for query, answers in zip(queries, zip(*outcomes, strict=True), strict=True):
            for at, (found, name) in enumerate(zip(answers, names, strict=True)):
                source = f"{name}[{at}]" if names.count(name) > 1 else name
                if is_document_list(found):
                    kept = found[: self.k]  # None: all
                    weight = self.weights[at] if self.weights else 1.0
                    ranked_lists.append(RankedList(kept, weight=weight, query=query, source=source))
                else:
                    error = found if isinstance(found, BaseException) else _not_documents(found)
                    shown = redact_credentials(f"{type(error).__name__}: {error}")
                    failures.append(RetrievalFailure(source, query, shown, error))
        if failures:
            if self.on_error == "raise":
                raise failures[0].exception or RetrievalError(failures)
            if not ranked_lists:
                raise RetrievalError(failures) from failures[0].exception
            if self.on_error == "warn":
                warn_about(failures, len(queries), stacklevel=5)
        return RetrievalResults(ranked_lists, failures, queries)

    def _retrieve(self, value: Any, config: RunnableConfig) -> RetrievalResults:
        queries = _as_queries(value)
        limit = config.get("max_concurrency")  # set: at most that many retriever calls at once
        submit = partial(_executor.submit, _gated, Semaphore(limit)) if limit else _executor.submit  # type: ignore[call-arg]
        started = list(map(submit, self._calls(queries, config, limit, asynchronous=False)))
        return self._collect(queries, [_result(call, self.timeout, queries) for call in started])

    async def _aretrieve(
        self, value: Any, run_manager: Any, config: RunnableConfig
    ) -> RetrievalResults:
        queries = _as_queries(value)
        limit = config.get("max_concurrency")
        config = patch_config(config, callbacks=run_manager.get_child())
        calls = zip(self._calls(queries, config, limit, True), self.retrievers, strict=True)
        waits = [_aresult(call(), self.timeout, queries, each) for call, each in calls]
        gathered = await gather_with_concurrency(limit or None, *waits)
        return self._collect(queries, gathered)

    def with_k(self, k: int | None) -> MultiRetriever:
        """Itself with ``k`` for one call (``invoke(queries, k=3)``, as a ``BaseRetriever``'s)."""
        return self if k is None else type(self)(**{**dict(self), "k": k})  # validated

    def weighted_for(self, fusion: BaseFusion) -> tuple[MultiRetriever, BaseFusion]:
        """(this fan-out, ``fusion``) with the fusion's ``weights`` moved here: one per retriever
        (as EnsembleRetriever's), however many queries (ranked lists) a call searches."""
        if fusion.weights is None:
            return self, fusion
        if self.weights not in (None, fusion.weights):
            raise ValueError(f"weights given twice: {fusion.weights} (fusion), {self.weights}")
        weighted = type(self)(**{**dict(self), "weights": fusion.weights})  # one per retriever
        return weighted, fusion.model_copy(update={"weights": None})

    def invoke(  # type: ignore[override]
        self, input: Any, config: RunnableConfig | None = None, k: int | None = None
    ) -> RetrievalResults:
        used = self if k is None else self.with_k(k)  # a keyword it does not take: TypeError
        return traced_call(used, used._retrieve, input, config)  # type: ignore[no-any-return]

    async def ainvoke(  # type: ignore[override]
        self, input: Any, config: RunnableConfig | None = None, k: int | None = None
    ) -> RetrievalResults:
        used = self if k is None else self.with_k(k)
        return await used._acall_with_config(used._aretrieve, input, config)  # type: ignore[return-value]
