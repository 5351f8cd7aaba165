"""LangChain template: HyDE (hypothetical document embeddings) with rag-fusion-chain."""

from hyde.chain import chain, sources_chain

__all__ = ["chain", "sources_chain"]
