"""What the kit's own retrievers share: document identity, scored copies, and
:class:`BatchedRetriever`, which answers ``batch``/``abatch`` with one underlying call."""

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
from pydantic import ConfigDict, Field

from rag_fusion_chain.fusion import SCORE_KEY, document_id
from rag_fusion_chain.retrievers.fanout import DEFAULT_K
from rag_fusion_chain.validation import validate_count


def with_identity(document: Document) -> Document:
    """``document`` if it has an id, else a copy whose id is its content hash (so the keyword and
    the vector hit of one chunk carry the same id)."""
    return document if document.id else document.model_copy(update={"id": document_id(document)})


def scored_copy(document: Document, score: float) -> Document:
    """A copy of ``document`` with an id and the higher-is-better ``metadata["score"]``."""
    identified = with_identity(document)
    return identified.model_copy(
        update={"metadata": {**identified.metadata, SCORE_KEY: float(score)}}
    )


class BatchedRetriever(BaseRetriever):
    """A retriever answering N queries with one underlying call (one ``bm25s.retrieve``, one
    embedding request) while reporting one retriever run per query; ``invoke(query, k=3)``."""

    model_config = ConfigDict(extra="forbid")  # search_kwargs=, preprocess_func=: refused, not lost
    k: int = Field(default=DEFAULT_K, gt=0, strict=True)
    """Documents returned per query; override per call with ``invoke(query, k=...)``."""

    def _retrieve_many(
        self, queries: list[str], k: int, run_managers: Sequence[CallbackManagerForRetrieverRun]
    ) -> list[list[Document]]:
        """One ranked list per query: the one method subclasses implement."""
        raise NotImplementedError

    async def _aretrieve_many(
        self,
        queries: list[str],
        k: int,
        run_managers: Sequence[AsyncCallbackManagerForRetrieverRun],
    ) -> list[list[Document]]:
        """Async variant; by default :meth:`_retrieve_many` in an executor thread."""
        sync_managers = [manager.get_sync() for manager in run_managers]
        return await run_in_executor(None, self._retrieve_many, queries, k, sync_managers)

    def _resolve_k(self, k: int | None) -> int:
        return self.k if k is None else validate_count("k", k)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return self._retrieve_many([query], self._resolve_k(k), [run_manager])[0]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return (await self._aretrieve_many([query], self._resolve_k(k), [run_manager]))[0]

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
        queries: list[str],
        config: RunnableConfig | list[RunnableConfig] | None,
        kwargs: dict[str, Any],
        manager_class: type[CallbackManager | AsyncCallbackManager],
    ) -> tuple[int, list[tuple[Any, str, dict[str, Any]]]]:
        """``k``, and each query's callback manager and run (name, id) to start. One config for
        the whole batch is configured once (the costly part; the runs are siblings either way), a
        list of configs once per query."""
        k = kwargs.pop("k", None)
        if kwargs:
            raise TypeError(f"unexpected keyword arguments for batch: {sorted(kwargs)}")
        configs = get_config_list(config, len(queries))
        one_config = not isinstance(config, Sequence)
        shared = self._configure(configs[0], manager_class) if one_config else None
        starts = []
        for query, each in zip(queries, configs, strict=True):
            manager = shared or self._configure(each, manager_class)
            name = each.get("run_name") or self.get_name()
            starts.append((manager, query, {"name": name, "run_id": each.pop("run_id", None)}))
        return self._resolve_k(k), starts

    def batch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Retrieve for every query with one underlying call; one callback run per query."""
        if not inputs:
            return []
        k, starts = self._run_starts(inputs, config, kwargs, CallbackManager)
        run_managers = [manager.on_retriever_start(None, q, **run) for manager, q, run in starts]
        try:
            results = self._retrieve_many(list(inputs), k, run_managers)
        except Exception as error:
            for run_manager in run_managers:
                run_manager.on_retriever_error(error)
            if return_exceptions:
                return [error] * len(inputs)
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
        k, starts = self._run_starts(inputs, config, kwargs, AsyncCallbackManager)
        run_managers = [
            await manager.on_retriever_start(None, q, **run) for manager, q, run in starts
        ]
        try:
            results = await self._aretrieve_many(list(inputs), k, run_managers)
        except Exception as error:
            for run_manager in run_managers:
                await run_manager.on_retriever_error(error)
            if return_exceptions:
                return [error] * len(inputs)
            raise
        for run_manager, documents in zip(run_managers, results, strict=True):
            await run_manager.on_retriever_end(documents)
        return results
