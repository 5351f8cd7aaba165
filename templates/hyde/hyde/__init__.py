"""LangChain template: HyDE (hypothetical document embeddings) with rag-fusion-chain."""

from hyde.chain import chain

__all__ = ["chain"]
