"""The chain this template serves, step-back prompting (see README.md)."""

from rag_fusion_chain.serving import build_chain

chain = build_chain("step-back")
