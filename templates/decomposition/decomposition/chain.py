"""The chain this template serves, question decomposition (see README.md)."""

from rag_fusion_chain.serving import build_chain

chain = build_chain("decomposition")
