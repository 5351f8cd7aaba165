"""LangChain template: RAG-Fusion with rag-fusion-chain."""

from rag_fusion.chain import chain

__all__ = ["chain"]
