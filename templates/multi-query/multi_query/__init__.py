"""LangChain template: multi-query retrieval with rag-fusion-chain."""

from multi_query.chain import chain, sources_chain

__all__ = ["chain", "sources_chain"]
