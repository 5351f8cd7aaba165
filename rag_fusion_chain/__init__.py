"""rag_fusion_chain: LangChain runnables for query transformation and result fusion.

>>> from rag_fusion_chain import queries, fusion, rag_fusion_chain
>>> # retrieval = queries.rag_fusion(llm, n=4) | retriever.map() | fusion.reciprocal_rank_fusion
>>> # chain = rag_fusion_chain([bm25, vectors], llm)  # or llm=None: offline

Importing the package needs only langchain-core; integrations load lazily where they are used.
"""

from rag_fusion_chain import chains, fusion, prompts, queries, strategies
from rag_fusion_chain._version import __version__
from rag_fusion_chain.chains import (
    chain_for,
    decomposition_chain,
    hyde_chain,
    multi_query_chain,
    rag_fusion_chain,
    retrieval_chain,
    rewrite_chain,
    step_back_chain,
    with_step,
)
from rag_fusion_chain.fusion import (
    DistBasedScoreFusion,
    ReciprocalRankFusion,
    RelativeScoreFusion,
    UniqueUnion,
    dist_based_score_fusion,
    reciprocal_rank_fusion,
    relative_score_fusion,
    unique_union,
)
from rag_fusion_chain.retrievers import FusionRetriever, MultiRetriever

__all__ = [
    "DistBasedScoreFusion",
    "FusionRetriever",
    "MultiRetriever",
    "ReciprocalRankFusion",
    "RelativeScoreFusion",
    "UniqueUnion",
    "__version__",
    "chain_for",
    "chains",
    "decomposition_chain",
    "dist_based_score_fusion",
    "fusion",
    "hyde_chain",
    "multi_query_chain",
    "prompts",
    "queries",
    "rag_fusion_chain",
    "reciprocal_rank_fusion",
    "relative_score_fusion",
    "retrieval_chain",
    "rewrite_chain",
    "step_back_chain",
    "strategies",
    "unique_union",
    "with_step",
]
