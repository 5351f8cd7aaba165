"""Result fusion: pure scores per algorithm (:mod:`.algorithms`), thin Runnables over them giving
fresh copies with ``metadata["fusion_score"]`` (:mod:`.runnables`: best first, a union in first-seen
order), and the input's ranked lists, weights and document identity (:mod:`.inputs`)."""

from rag_fusion_chain.fusion.algorithms import (
    RRF_K,
    distribution_based_scores,
    normalize_scores,
    reciprocal_rank_scores,
    relative_scores,
    union_scores,
)
from rag_fusion_chain.fusion.inputs import (
    DOCUMENT_ID,
    FUSION_SCORE_KEY,
    SCORE_KEY,
    RankedList,
    document_id,
)
from rag_fusion_chain.fusion.runnables import (
    FUSIONS,
    BaseFusion,
    DistBasedScoreFusion,
    ReciprocalRankFusion,
    RelativeScoreFusion,
    UniqueUnion,
    dist_based_score_fusion,
    reciprocal_rank_fusion,
    relative_score_fusion,
    unique_union,
)

__all__ = [
    "DOCUMENT_ID",
    "FUSIONS",
    "FUSION_SCORE_KEY",
    "RRF_K",
    "SCORE_KEY",
    "BaseFusion",
    "DistBasedScoreFusion",
    "RankedList",
    "ReciprocalRankFusion",
    "RelativeScoreFusion",
    "UniqueUnion",
    "dist_based_score_fusion",
    "distribution_based_scores",
    "document_id",
    "normalize_scores",
    "reciprocal_rank_fusion",
    "reciprocal_rank_scores",
    "relative_score_fusion",
    "relative_scores",
    "union_scores",
    "unique_union",
]
