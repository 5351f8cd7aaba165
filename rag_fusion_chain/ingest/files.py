"""Load one file (UTF-8 text or markdown, HTML, PDF, a BEIR ``corpus.jsonl``) within bounds:
``max_file_size`` (a larger file is not read), :data:`MAX_HTML_SIZE`, :data:`MAX_PDF_CHARACTERS`
and :data:`PDF_TIME_BUDGET`; terminal escape sequences and control characters are dropped."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import time
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from rag_fusion_chain.ingest.html import HtmlLimitError, html_to_text
from rag_fusion_chain.ingest.problems import NoTextError, UnreadableSourceError, display_name
from rag_fusion_chain.validation import TERMINAL_ESCAPE, counted, require_extra, validate_count

DEFAULT_MAX_FILE_SIZE = 50_000_000
"""Bytes: larger files are skipped (reported), never read."""
MAX_HTML_SIZE = 3_000_000
"""Bytes of HTML parsed at most per file or page (BeautifulSoup reads about 0.5 MB/s)."""
MAX_PDF_CHARACTERS = 10_000_000
"""Characters of text read at most per PDF (a shared-stream bomb yields millions per page)."""
PDF_TIME_BUDGET = 5.0
"""Seconds of page reading at most per PDF, checked between pages."""
KINDS = {".txt": "text", ".md": "text", ".markdown": "text", ".html": "html", ".htm": "html",
         ".pdf": "pdf", ".jsonl": "beir"}  # fmt: skip
"""File kinds by extension; any other file is read as UTF-8 text."""
_CONTROL_CHARACTER = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")

FileIdentity = tuple[int, int]  # (st_dev, st_ino): the file opened must be the file checked


def load_file(
    path: str | os.PathLike[str],
    *,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    identity: FileIdentity | None = None,
    source: str | None = None,
) -> list[Document]:
    """Documents of one file by its extension (:data:`KINDS`), named ``source`` (default
    ``path``); with ``identity``, a file changed since it was checked is refused."""
    name = source or str(path)
    if display_name(name) != name:
        raise UnreadableSourceError(display_name(name), "file name is not UTF-8")
    kind = KINDS.get(Path(name).suffix.lower() or Path(path).suffix.lower(), "text")
    data = _read(Path(path), name, max_file_size, identity)
    if kind == "pdf":
        return pdf_documents(data, name)
    if kind == "html":
        return [html_document(data, name)]
    if kind == "beir":
        return beir_documents(data.split(b"\n"), name)
    return [text_document(data, name)]


def load_pdf(
    path: str | os.PathLike[str], *, max_file_size: int = DEFAULT_MAX_FILE_SIZE
) -> list[Document]:
    """One Document per PDF page with text (``page`` from 0), others warned; NoTextError if none."""
    file = existing_path(path)
    return pdf_documents(_read(file, str(file), max_file_size, None), str(file))


def text_document(data: bytes, source: str, charset: str | None = None) -> Document:
    """The Document of a text file or page (``charset``, else UTF-8); NoTextError if blank."""
    if not (text := _decoded(data, source, charset)).strip():  # as an empty PDF: skipped, reported
        raise NoTextError(source, "no text found")
    return Document(page_content=text, metadata={"source": source}, id=source)


def _decoded(data: bytes, source: str, charset: str | None = None) -> str:
    """``data`` as text in ``charset`` (else UTF-8, a BOM dropped), cleaned by :func:`clean_text`."""
    try:
        return clean_text(data.decode(charset or "utf-8-sig"))
    except UnicodeDecodeError as error:
        detail = f"byte {error.start}: {error.reason}"
        raise UnreadableSourceError(source, f"not {charset or 'UTF-8'}", detail) from error
    except LookupError as error:
        raise UnreadableSourceError(source, f"unknown charset {charset}") from error


_PYMUPDF_ADD_ONS = ("pymupdf.layout", "pymupdf4llm")  # ONNX models pymupdf 2 imports if installed


def import_pymupdf() -> Any:
    """pymupdf without its add-ons, whose onnxruntime writes ``~/.cache/Microsoft`` and posts
    telemetry to Microsoft (a ``None`` in ``sys.modules`` reads to pymupdf as "not installed")."""
    hidden = (
        [] if "pymupdf" in sys.modules else [m for m in _PYMUPDF_ADD_ONS if m not in sys.modules]
    )
    sys.modules.update(dict.fromkeys(hidden))  # type: ignore[arg-type]
    try:
        return require_extra("pymupdf", "ingest")
    finally:
        for module in hidden:
            del sys.modules[module]


def pdf_documents(data: bytes, source: str) -> list[Document]:
    """One Document per page of the PDF ``data`` that has text, within the PDF bounds."""
    pymupdf = import_pymupdf()
    if not data:
        raise UnreadableSourceError(source, "empty PDF")
    deadline = time.monotonic() + PDF_TIME_BUDGET
    pages: list[str] = []
    characters = 0
    try:
        with pymupdf.open(stream=data, filetype="pdf") as pdf:
            for page in pdf:
                if time.monotonic() > deadline:
                    limit = f"the {PDF_TIME_BUDGET:g} s limit to read"
                    raise UnreadableSourceError(source, f"PDF pages take longer than {limit}")
                pages.append(clean_text(page.get_text()))
                characters += len(pages[-1])
                if characters > MAX_PDF_CHARACTERS:
                    limit = f"the {MAX_PDF_CHARACTERS:,}-character limit"
                    raise UnreadableSourceError(source, f"PDF text beyond {limit}")
    except (pymupdf.FileDataError, RuntimeError, ValueError) as error:
        if isinstance(error, UnreadableSourceError):
            raise
        raise UnreadableSourceError(source, "corrupt PDF", str(error)) from error
    documents = [
        Document(
            page_content=text,
            metadata={"source": source, "page": number, "total_pages": len(pages)},
            id=f"{source}#page={number + 1}",
        )
        for number, text in enumerate(pages)
        if text.strip()
    ]
    blank = f"{len(pages) - len(documents)} of {len(pages)} pages have no text (scanned images?)"
    if not documents:  # as an empty text file: skipped and reported, not a file of no documents
        raise NoTextError(source, "no text found (scanned images?)")
    if len(documents) < len(pages):
        warnings.warn(f"{source}: {blank} and were skipped", stacklevel=3)
    return documents


def clean_text(text: str) -> str:
    """``text`` without terminal escape sequences and control characters but tab and newlines."""
    return _CONTROL_CHARACTER.sub("", TERMINAL_ESCAPE.sub("", text))


def html_document(
    markup: str | bytes,
    source: str,
    *,
    encoding: str | None = None,
    classes: Sequence[str] | None = None,
) -> Document:
    """The main text (or ``classes``' text) of an HTML page, its ``title`` in metadata."""
    if len(markup) > MAX_HTML_SIZE:
        reason = f"HTML larger than the {byte_size(MAX_HTML_SIZE)} parse limit"
        raise UnreadableSourceError(source, reason)
    try:
        page = html_to_text(markup, encoding=encoding, classes=classes)
    except HtmlLimitError as error:
        raise UnreadableSourceError(source, str(error)) from error
    if not page.text:
        raise NoTextError(source, "no text found")
    title = clean_text(page.title)
    metadata = {"source": source, "title": title} if title else {"source": source}
    return Document(page_content=clean_text(page.text), metadata=metadata, id=source)


def _read(file: Path, source: str, max_file_size: int, identity: FileIdentity | None) -> bytes:
    """The bytes of ``file``, opened non-blocking (a FIFO cannot hang the reader), if a regular
    file within the size cap and, with ``identity``, the file checked."""
    validate_count("max_file_size", max_file_size)
    try:
        with os.fdopen(os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as stream:
            status = os.fstat(stream.fileno())
            if identity is not None and (status.st_dev, status.st_ino) != identity:
                raise UnreadableSourceError(source, "changed while being read")
            if not stat.S_ISREG(status.st_mode):
                raise UnreadableSourceError(source, "not a regular file")
            too_large = f"larger than the {byte_size(max_file_size)} limit"
            if status.st_size > max_file_size:
                raise UnreadableSourceError(source, too_large)
            data = stream.read(max_file_size + 1)
    except OSError as error:
        raise UnreadableSourceError(source, "cannot be read", error.strerror or "") from error
    if len(data) > max_file_size:  # grew after it was checked
        raise UnreadableSourceError(source, too_large)
    return data


def byte_size(count: int) -> str:
    """A byte count for people: ``50 MB``, ``1.5 kB``, ``12 bytes``."""
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if count >= size:
            return f"{count / size:g} {unit}"
    return counted(count, "byte")


def beir_documents(lines: Iterable[bytes], source: str) -> list[Document]:
    """The Documents of a BEIR ``corpus.jsonl``'s lines: id ``_id``, text ``title\\ntext``."""
    documents: list[Document] = []
    seen: set[str] = set()
    for number, raw in enumerate(lines, start=1):
        where = f"{source}:{number}"
        line = _decoded(raw, where)
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as error:  # too deep, an int of 5,000 digits
            raise UnreadableSourceError(where, "invalid JSON", str(error)) from error
        if not isinstance(record, dict) or "_id" not in record:
            raise UnreadableSourceError(where, "expected a JSON object with an '_id' key")
        doc_id = str(record["_id"])
        if doc_id in seen:
            raise UnreadableSourceError(where, f"duplicate _id {doc_id!r}")
        seen.add(doc_id)
        title = str(record.get("title") or "").strip()
        text = str(record.get("text") or "")
        extra = record["metadata"] if isinstance(record.get("metadata"), dict) else {}
        metadata = {**extra, "doc_id": doc_id, "title": title, "source": source}
        content = clean_text(f"{title}\n{text}" if title else text)
        documents.append(Document(content, metadata=metadata, id=doc_id))
    return documents


def existing_path(path: str | os.PathLike[str]) -> Path:
    """``path`` (``~`` expanded) if it exists, else FileNotFoundError naming it."""
    resolved = Path(path).expanduser()
    if not resolved.exists():
        raise FileNotFoundError(f"no such file or directory: {resolved}")
    return resolved
