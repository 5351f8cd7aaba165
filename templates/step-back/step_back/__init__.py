"""LangChain template: step-back prompting with rag-fusion-chain."""

from step_back.chain import chain, sources_chain

__all__ = ["chain", "sources_chain"]
