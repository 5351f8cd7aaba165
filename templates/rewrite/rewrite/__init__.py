"""A LangChain template of rag-fusion-chain: one strategy's chain (see README.md)."""

from .chain import chain, sources_chain

__all__ = ["chain", "sources_chain"]
