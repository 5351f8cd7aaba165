"""rag_fusion_chain: LangChain runnables for query transformation and result fusion.

>>> from rag_fusion_chain import queries, fusion
>>> # retrieval = queries.rag_fusion(llm, n=4) | retriever.map() | fusion.reciprocal_rank_fusion

Importing the package needs only langchain-core; integrations load lazily where they are used.
"""

from rag_fusion_chain import chains, fusion, prompts, queries
from rag_fusion_chain._version import __version__
from rag_fusion_chain.fusion import (
    DistBasedScoreFusion,
    RankedList,
    ReciprocalRankFusion,
    RelativeScoreFusion,
    UniqueUnion,
    dist_based_score_fusion,
    reciprocal_rank_fusion,
    relative_score_fusion,
    unique_union,
)
from rag_fusion_chain.queries import QueryListParser
from rag_fusion_chain.retrievers import FusionRetriever, MultiRetriever

__all__ = [
    "DistBasedScoreFusion",
    "FusionRetriever",
    "MultiRetriever",
    "QueryListParser",
    "RankedList",
    "ReciprocalRankFusion",
    "RelativeScoreFusion",
    "UniqueUnion",
    "__version__",
    "chains",
    "dist_based_score_fusion",
    "fusion",
    "prompts",
    "queries",
    "reciprocal_rank_fusion",
    "relative_score_fusion",
    "unique_union",
]
