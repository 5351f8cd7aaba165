"""LangChain template: question decomposition with rag-fusion-chain."""

from decomposition.chain import chain, sources_chain

__all__ = ["chain", "sources_chain"]
