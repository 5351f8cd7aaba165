"""Fan-out over several retrievers: the names users import from here, gathered from their modules.

The fan-out lives in one module per concept; this module keeps ``from
rag_fusion_chain.retrievers.fanout import ...`` working:

* :mod:`~rag_fusion_chain.retrievers.results`: ``RetrievalResults``, ``RetrievalFailure``,
  ``RetrievalError``;
* :mod:`~rag_fusion_chain.retrievers.calls`: input checks, concurrency split, the time bound
  (``DEFAULT_TIMEOUT``, ``call_with_timeout``);
* :mod:`~rag_fusion_chain.retrievers.streams`: ``StreamingInvoke`` and stream helpers;
* :mod:`~rag_fusion_chain.retrievers.multi`: ``MultiRetriever``;
* :mod:`~rag_fusion_chain.retrievers.fusion_retriever`: ``FusionRetriever``, ``DEFAULT_K``.
"""

from __future__ import annotations

from rag_fusion_chain.retrievers.calls import (
    DEFAULT_TIMEOUT,
    accepts_k,
    as_query_list,
    as_retriever_list,
    call_with_timeout,
    source_names,
    split_concurrency,
)
from rag_fusion_chain.retrievers.fusion_retriever import DEFAULT_K, FusionRetriever
from rag_fusion_chain.retrievers.multi import MultiRetriever
from rag_fusion_chain.retrievers.results import (
    RetrievalError,
    RetrievalFailure,
    RetrievalResults,
    describe_error,
)
from rag_fusion_chain.retrievers.streams import StreamingInvoke, aadd_up, add_up

__all__ = [
    "DEFAULT_K",
    "DEFAULT_TIMEOUT",
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
