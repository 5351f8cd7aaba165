"""The chain this template serves, HyDE (hypothetical document embeddings) (see README.md)."""

from rag_fusion_chain.serving import build_chain

chain = build_chain("hyde")
