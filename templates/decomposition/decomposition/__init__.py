"""LangChain template: question decomposition with rag-fusion-chain."""

from decomposition.chain import chain

__all__ = ["chain"]
