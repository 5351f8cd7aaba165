"""LangChain template: RAG-Fusion with rag-fusion-chain."""

from rag_fusion.chain import chain, sources_chain

__all__ = ["chain", "sources_chain"]
