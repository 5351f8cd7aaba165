"""Result fusion: merge several ranked lists of Documents into one.

Pure functions do the arithmetic (one small function per algorithm, as in ranx's ``fusion/``);
Runnables wrap them so that ``generator | retriever.map() | fusion`` just works.

Contracts (see DESIGN.md):

* **Input**: ``list[list[Document]]`` (one ranked list per query or retriever), or the nested
  ``list[list[list[Document]]]`` shaped ``[query][retriever][rank]`` that mapping several retrievers
  over several queries produces. A :class:`RankedList` carries its own weight.
* **Identity**: the passage text by default, as LangChain's ``EnsembleRetriever`` does, so the same
  passage returned by two stores (each with its own ids, or none) is one document. ``id_key`` names a
  metadata key, as in LangChain (``id_key="id"`` is ``metadata["id"]``), or :data:`DOCUMENT_ID` for
  ``Document.id``, to identify documents by key instead (a document
  without that key falls back to its text). The first appearance's metadata (and id) is kept.
* **Output**: fresh copies (inputs are never mutated) with ``metadata["fusion_score"]``, sorted by score
  descending, ties broken by first appearance, cut to ``top_n``.
* **Per-call settings**: ``top_n`` and ``weights`` (and RRF's ``k``) are honoured when given through
  ``.bind(...)`` or ``invoke(..., top_n=3)``; any other keyword raises TypeError naming it.
"""

from rag_fusion_chain.fusion.identity import DOCUMENT_ID, IdentityIndex, document_id
from rag_fusion_chain.fusion.ranked_lists import (
    FUSION_SCORE_KEY,
    SCORE_KEY,
    FusionInput,
    FusionOutput,
    RankedList,
    flatten_ranked_lists,
    validate_weights,
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
from rag_fusion_chain.fusion.scores import (
    RRF_K,
    distribution_based_scores,
    normalize_scores,
    normalized_list_scores,
    rank_fused,
    reciprocal_rank_scores,
    relative_scores,
    union_scores,
)

__all__ = [
    "DOCUMENT_ID",
    "FUSIONS",
    "FUSION_SCORE_KEY",
    "SCORE_KEY",
    "RRF_K",
    "FusionInput",
    "FusionOutput",
    "BaseFusion",
    "DistBasedScoreFusion",
    "RankedList",
    "ReciprocalRankFusion",
    "RelativeScoreFusion",
    "UniqueUnion",
    "dist_based_score_fusion",
    "distribution_based_scores",
    "document_id",
    "flatten_ranked_lists",
    "IdentityIndex",
    "normalize_scores",
    "normalized_list_scores",
    "rank_fused",
    "reciprocal_rank_fusion",
    "reciprocal_rank_scores",
    "relative_score_fusion",
    "relative_scores",
    "union_scores",
    "unique_union",
    "validate_weights",
]
