"""The chains this template serves, HyDE (hypothetical document embeddings) (see README.md): the answer, and the answer with sources."""

try:
    from rag_fusion_chain.serving import build_chain
except ModuleNotFoundError as missing:  # the kit is not on PyPI: pip cannot bring it by name
    if missing.name != "rag_fusion_chain":
        raise
    raise ImportError(
        "the hyde template needs the rag-fusion-chain kit, which is not on PyPI: pip install "
        '"rag-fusion-chain[faiss,bm25,hf,openai,serve] @ git+https://github.com/<owner>/rag-fusion-chain.git"'
        ' (or pip install -e "<your clone>[faiss,bm25,hf,openai,serve]")'
    ) from None

chain = build_chain("hyde")
sources_chain = build_chain("hyde", return_sources=True)
