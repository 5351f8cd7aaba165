"""Load documents (web pages, PDF, HTML, text and markdown, folders, BEIR corpora) and split them.

Loading and splitting only: nothing here embeds or stores. :func:`load_with_report` loads many
sources and says which were skipped and why (unreadable, not UTF-8, corrupt PDF, too large, a
link out of the folder, a content type that is not text...); :func:`load` returns just the
documents. Every wait and size is bounded: ``max_file_size`` per file (50 MB), ``timeout`` per
URL fetch as a whole (30 s), ``max_bytes`` per page (10 MB). Every chunk gets a stable id (see
:func:`split_documents`).

>>> chunks = split_documents(load(["notes/", "paper.pdf"]))  # doctest: +SKIP

Modules: ``sources`` (the dispatcher), ``folders``, ``files``, ``html``, ``web``, ``problems``
(skip reports), ``splitting``.
"""

from rag_fusion_chain.ingest.files import (
    BEIR_EXTENSIONS,
    DEFAULT_MAX_FILE_SIZE,
    HTML_EXTENSIONS,
    PDF_EXTENSIONS,
    TEXT_EXTENSIONS,
    load_beir_corpus,
    load_file,
    load_html,
    load_pdf,
    load_text,
)
from rag_fusion_chain.ingest.folders import DIRECTORY_EXTENSIONS, load_directory
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
from rag_fusion_chain.ingest.sources import ACCEPTED_SOURCES, load, load_with_report
from rag_fusion_chain.ingest.splitting import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_ENCODING,
    SEPARATORS,
    count_tokens,
    split_documents,
    text_splitter,
)
from rag_fusion_chain.ingest.web import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT,
    DENY_PRIVATE_ENV,
    USER_AGENT,
    load_web,
)

__all__ = [
    "ACCEPTED_SOURCES",
    "BEIR_EXTENSIONS",
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_ENCODING",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_FILE_SIZE",
    "DEFAULT_TIMEOUT",
    "DENY_PRIVATE_ENV",
    "DIRECTORY_EXTENSIONS",
    "HTML_EXTENSIONS",
    "PDF_EXTENSIONS",
    "SEPARATORS",
    "TEXT_EXTENSIONS",
    "USER_AGENT",
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
