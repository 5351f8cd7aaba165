"""Streams of queries: reading them into complete queries, and invoking a sequence by streaming it.

LangChain invokes a sequence step after step, each step waiting for all of the previous one's
output; streamed, each step starts on the first chunks of its input. :class:`StreamingInvoke` gives
``invoke`` that streamed route, so that the fan-out searches each query as soon as it is written.

>>> add_up([["solar"], ["wind"]])
['solar', 'wind']
"""

from __future__ import annotations

import functools
import operator
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar

from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig, RunnableSerializable
from langchain_core.runnables.utils import Input, Output

from rag_fusion_chain.retrievers.calls import QueriesInput, as_query_list

T = TypeVar("T")


def add_up(chunks: Iterable[T]) -> T:
    """The chunks of a stream added up as LangChain adds them; a single chunk is returned as is."""
    return functools.reduce(operator.add, chunks)


async def aadd_up(chunks: AsyncIterator[T]) -> T:
    """Async :func:`add_up`."""
    return add_up([chunk async for chunk in chunks])


async def one(value: T) -> AsyncIterator[T]:
    """An async stream of the single chunk ``value``."""
    yield value


class QueryStream:
    """Reads the chunks of a query stream into complete queries.

    Every item of a list chunk is a complete query, returned at once. ``str`` chunks are pieces of
    one query (LangChain adds chunks up: ``"solar " + "power"``), complete when the stream ends.

    >>> reader = QueryStream()
    >>> reader.feed(["solar", "wind"]), reader.feed(["tidal"]), reader.finish()
    (['solar', 'wind'], ['tidal'], [])
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


class StreamingInvoke(RunnableBinding[Input, Output]):
    """Run ``bound`` by streaming it, on ``invoke`` and ``batch`` too, and add the chunks up.

    Wrapped, a sequence takes the streamed route whichever way it is called: in
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


__all__ = ["QueryStream", "StreamingInvoke", "aadd_up", "add_up", "one"]
