"""What the kit's own retrievers share: document identity, scored copies, batched retrieval.

* :func:`with_identity` gives a document without ``Document.id`` the content hash of
  :func:`rag_fusion_chain.fusion.document_id`, so the keyword and the vector hit of one chunk
  carry the same id.
* :func:`scored_copy` puts a higher-is-better relevance in ``metadata["score"]`` of a fresh copy.
* :class:`BatchedRetriever` answers ``batch``/``abatch`` with ONE underlying call for all queries
  (one ``bm25s.retrieve``, one embedding request, ...), keeps a callback run per query, and
  honours ``k`` at invoke time: ``retriever.invoke("query", k=3)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForRetrieverRun,
    CallbackManager,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list, run_in_executor
from pydantic import field_validator

from rag_fusion_chain.fusion import SCORE_KEY, document_id
from rag_fusion_chain.retrievers.fanout import DEFAULT_K
from rag_fusion_chain.validation import validate_count


def with_identity(document: Document) -> Document:
    """Return ``document`` if it has an id, else a copy whose id is its content hash.

    >>> with_identity(Document("text", id="doc-1")).id
    'doc-1'
    >>> len(with_identity(Document("text")).id)
    32
    """
    if document.id:
        return document
    return document.model_copy(update={"id": document_id(document)})


def scored_copy(document: Document, score: float) -> Document:
    """A copy of ``document`` with ``metadata["score"] = score`` and an id (never mutates).

    >>> scored_copy(Document("text", id="a"), 0.5).metadata
    {'score': 0.5}
    """
    identified = with_identity(document)
    return identified.model_copy(
        update={"metadata": {**identified.metadata, SCORE_KEY: float(score)}}
    )


class BatchedRetriever(BaseRetriever):
    """A retriever that answers N queries with one underlying call.

    Subclasses implement :meth:`_retrieve_many` (and :meth:`_aretrieve_many` when they have a
    native async path). ``invoke`` is a batch of one; ``batch``/``abatch`` (hence
    ``retriever.map()`` and fan-out code calling ``.batch(queries, config)``) make one call for
    all queries while still reporting one retriever run per query to callbacks and tracing.
    """

    k: int = DEFAULT_K
    """Documents returned per query; override per call with ``invoke(query, k=...)``."""

    @field_validator("k")
    @classmethod
    def _check_k(cls, k: int) -> int:
        return validate_count("k", k)

    def _retrieve_many(
        self,
        queries: list[str],
        k: int,
        run_managers: Sequence[CallbackManagerForRetrieverRun],
    ) -> list[list[Document]]:
        """Return one ranked list per query; the single place subclasses do their work."""
        raise NotImplementedError

    async def _aretrieve_many(
        self,
        queries: list[str],
        k: int,
        run_managers: Sequence[AsyncCallbackManagerForRetrieverRun],
    ) -> list[list[Document]]:
        """Async variant; by default runs :meth:`_retrieve_many` in an executor thread."""
        sync_managers = [manager.get_sync() for manager in run_managers]
        return await run_in_executor(None, self._retrieve_many, queries, k, sync_managers)

    def _resolve_k(self, k: int | None) -> int:
        return self.k if k is None else validate_count("k", k)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return self._retrieve_many([query], self._resolve_k(k), [run_manager])[0]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        return (await self._aretrieve_many([query], self._resolve_k(k), [run_manager]))[0]

    def _batch_k(self, kwargs: dict[str, Any]) -> int:
        k = kwargs.pop("k", None)
        if kwargs:
            raise TypeError(f"unexpected keyword arguments for batch: {sorted(kwargs)}")
        return self._resolve_k(k)

    def _configure(
        self, config: RunnableConfig, manager_class: type[CallbackManager | AsyncCallbackManager]
    ) -> Any:
        """Configure a callback manager exactly as ``BaseRetriever.invoke`` does."""
        return manager_class.configure(
            config.get("callbacks"),
            None,
            inheritable_tags=config.get("tags"),
            local_tags=self.tags,
            inheritable_metadata={**(config.get("metadata") or {}), **self._get_ls_params()},
            local_metadata=self.metadata,
        )

    def _run_starts(
        self,
        config: RunnableConfig | list[RunnableConfig] | None,
        count: int,
        manager_class: type[CallbackManager | AsyncCallbackManager],
    ) -> list[tuple[Any, str, Any]]:
        """(callback manager, run name, run id) to start each query's run with.

        One config for the whole batch is configured once (configuring is the costly part; the
        queries' runs are siblings under the same parent either way); a sequence of configs (as
        ``get_config_list`` reads one), once per query.
        """
        configs = get_config_list(config, count)
        one_config = not isinstance(config, Sequence)
        shared = self._configure(configs[0], manager_class) if one_config else None
        starts = []
        for query_config in configs:
            manager = self._configure(query_config, manager_class) if shared is None else shared
            name = query_config.get("run_name") or self.get_name()
            starts.append((manager, name, query_config.pop("run_id", None)))
        return starts

    def batch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Retrieve for every query with one underlying call; one callback run per query.

        >>> # retriever.batch(["solar power", "wind power"], k=3)  -> [[...3 docs], [...3 docs]]
        """
        if not inputs:
            return []
        queries = list(inputs)
        k = self._batch_k(dict(kwargs))
        run_managers = [
            manager.on_retriever_start(None, query, name=name, run_id=run_id)
            for query, (manager, name, run_id) in zip(
                queries, self._run_starts(config, len(queries), CallbackManager), strict=True
            )
        ]
        try:
            results = self._retrieve_many(queries, k, run_managers)
        except Exception as error:
            for run_manager in run_managers:
                run_manager.on_retriever_error(error)
            if return_exceptions:
                return [error] * len(queries)
            raise
        for run_manager, documents in zip(run_managers, results, strict=True):
            run_manager.on_retriever_end(documents)
        return results

    async def abatch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Async :meth:`batch`: one underlying call for all queries."""
        if not inputs:
            return []
        queries = list(inputs)
        k = self._batch_k(dict(kwargs))
        run_managers = [
            await manager.on_retriever_start(None, query, name=name, run_id=run_id)
            for query, (manager, name, run_id) in zip(
                queries, self._run_starts(config, len(queries), AsyncCallbackManager), strict=True
            )
        ]
        try:
            results = await self._aretrieve_many(queries, k, run_managers)
        except Exception as error:
            for run_manager in run_managers:
                await run_manager.on_retriever_error(error)
            if return_exceptions:
                return [error] * len(queries)
            raise
        for run_manager, documents in zip(run_managers, results, strict=True):
            await run_manager.on_retriever_end(documents)
        return results


__all__ = ["BatchedRetriever", "scored_copy", "with_identity"]
