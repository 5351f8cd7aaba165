"""Load documents (web pages, PDF, HTML, text and markdown, folders, BEIR corpora) and split them.

Loading and splitting only: nothing here embeds or stores. Every wait and size is bounded
(``max_file_size`` per file, ``timeout`` and ``max_bytes`` per URL); :func:`load_with_report`
says which sources were skipped and why.

>>> chunks = split_documents(load(["notes/", "paper.pdf"]))  # doctest: +SKIP
"""

from rag_fusion_chain.ingest.files import (
    DEFAULT_MAX_FILE_SIZE,
    load_beir_corpus,
    load_file,
    load_html,
    load_pdf,
    load_text,
)
from rag_fusion_chain.ingest.html import HtmlText, html_to_text
from rag_fusion_chain.ingest.problems import (
    LoadResult,
    NoTextError,
    Skipped,
    SkippedSourceWarning,
    SourceConnectionError,
    SourceProblem,
    SourceTimeoutError,
    UnreadableSourceError,
    describe_skipped,
)
from rag_fusion_chain.ingest.sources import load, load_directory, load_with_report
from rag_fusion_chain.ingest.splitting import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    count_tokens,
    split_documents,
    text_splitter,
)
from rag_fusion_chain.ingest.web import DENY_PRIVATE_ENV, load_web

__all__ = [
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MAX_FILE_SIZE",
    "DENY_PRIVATE_ENV",
    "HtmlText",
    "LoadResult",
    "NoTextError",
    "Skipped",
    "SkippedSourceWarning",
    "SourceConnectionError",
    "SourceProblem",
    "SourceTimeoutError",
    "UnreadableSourceError",
    "count_tokens",
    "describe_skipped",
    "html_to_text",
    "load",
    "load_beir_corpus",
    "load_directory",
    "load_file",
    "load_html",
    "load_pdf",
    "load_text",
    "load_web",
    "load_with_report",
    "split_documents",
    "text_splitter",
]
