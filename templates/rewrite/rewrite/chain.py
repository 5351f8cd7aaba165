"""The chains this template serves (see README.md): the answer, and the answer with sources."""

STRATEGY = __name__.split(".")[0].replace("_", "-")
"""The strategy is named by the package: ``rag_fusion`` serves ``rag-fusion``."""

try:
    from rag_fusion_chain.serving import build_chain
except ModuleNotFoundError as missing:  # the kit is not on PyPI: pip cannot bring it by name
    if missing.name != "rag_fusion_chain":
        raise
    raise ImportError(
        f"the {STRATEGY} template needs the rag-fusion-chain kit, which is not on PyPI: in the "
        "folder holding its clone, "
        'pip install -e "rag-fusion-chain[faiss,bm25,hf,openai,serve,ingest,cli]"'
    ) from None

chain = build_chain(STRATEGY)
sources_chain = build_chain(STRATEGY, return_sources=True)
