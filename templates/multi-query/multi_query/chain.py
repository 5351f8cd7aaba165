"""The chain this template serves, multi-query retrieval (see README.md)."""

from rag_fusion_chain.serving import build_chain

chain = build_chain("multi-query")
