"""The chain this template serves, RAG-Fusion (see README.md)."""

from rag_fusion_chain.serving import build_chain

chain = build_chain("rag-fusion")
