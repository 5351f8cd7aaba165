"""Load one file: UTF-8 text or markdown, HTML, PDF, or a BEIR ``corpus.jsonl``.

Every file is read through one bounded opening (:func:`open_bounded`): a file larger than
``max_file_size`` bytes (default 50 MB) is refused before it is read, and never read past the
limit if it grows meanwhile. A file that cannot be read, decoded or parsed raises
:class:`~rag_fusion_chain.ingest.problems.UnreadableSourceError` with a short reason.

Parsing is bounded too, and a source beyond a bound is refused with the bound in its reason:
HTML over :data:`MAX_HTML_SIZE` (or nested deeper than 256 elements), a PDF whose text passes
:data:`MAX_PDF_CHARACTERS` or whose pages take longer than :data:`PDF_TIME_BUDGET` to read. Terminal
escape sequences and control characters (tab and line breaks excepted) are dropped from the text.

>>> load_file("notes/paper.pdf")[0].metadata["page"]  # doctest: +SKIP
0
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from langchain_core.documents import Document

from rag_fusion_chain.ingest.html import HtmlLimitError, html_to_text
from rag_fusion_chain.ingest.problems import (
    NoTextError,
    UnreadableSourceError,
    display_name,
    missing_extra,
)

TEXT_EXTENSIONS = (".txt", ".md", ".markdown")
HTML_EXTENSIONS = (".html", ".htm")
PDF_EXTENSIONS = (".pdf",)
BEIR_EXTENSIONS = (".jsonl",)
DEFAULT_MAX_FILE_SIZE = 50_000_000
"""Bytes: larger files are skipped (reported), never read."""
MAX_HTML_SIZE = 3_000_000
"""Bytes of HTML parsed at most per file or page (BeautifulSoup reads about 0.5 MB/s)."""
MAX_PDF_CHARACTERS = 10_000_000
"""Characters of text read at most per PDF (a shared-stream bomb yields millions per page)."""
PDF_TIME_BUDGET = 5.0
"""Seconds of page reading at most per PDF, checked between pages."""
_TERMINAL_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
    r"|\x9b[0-?]*[ -/]*[@-~]"  # CSI, 8-bit form
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks
    r"|\x1b[ -/]*[0-~]"  # other escape sequences
)
_CONTROL_CHARACTER = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")

FileIdentity = tuple[int, int]
"""``(st_dev, st_ino)`` of a file, to check that the file opened is the file that was checked."""


def load_file(
    path: str | os.PathLike[str],
    *,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    identity: FileIdentity | None = None,
    source: str | None = None,
) -> list[Document]:
    """Documents of one file, by extension: PDF, HTML, BEIR ``.jsonl``, else UTF-8 text.

    ``source`` (default: ``path``) names the documents; ``identity``, when given, must be the
    identity of the file opened (else it changed since it was checked, and is refused).

    >>> load_file("notes/todo.md")[0].page_content  # doctest: +SKIP
    '# To do'
    """
    file = Path(path)
    name = source or str(file)
    if display_name(name) != name:
        raise UnreadableSourceError(display_name(name), "file name is not UTF-8")
    suffix = Path(name).suffix.lower() or file.suffix.lower()
    if suffix in PDF_EXTENSIONS:
        return pdf_documents(_read(file, name, max_file_size, identity), name)
    if suffix in HTML_EXTENSIONS:
        return [html_document(_read(file, name, max_file_size, identity), name)]
    if suffix in BEIR_EXTENSIONS:
        return _beir_documents(file, name, max_file_size, identity)
    return [_text_document(_read(file, name, max_file_size, identity), name)]


def load_text(
    path: str | os.PathLike[str], *, max_file_size: int = DEFAULT_MAX_FILE_SIZE
) -> list[Document]:
    """One Document for a UTF-8 text or markdown file, with its path as ``source`` and id.

    >>> load_text("README.md")[0].metadata  # doctest: +SKIP
    {'source': 'README.md'}
    """
    file = existing_file(path)
    return [_text_document(_read(file, str(file), max_file_size, None), str(file))]


def load_html(
    path: str | os.PathLike[str], *, max_file_size: int = DEFAULT_MAX_FILE_SIZE
) -> list[Document]:
    """One Document with the main text of an HTML file; its ``<title>`` in ``metadata``.

    >>> load_html("saved/page.html")[0].metadata["title"]  # doctest: +SKIP
    'Reciprocal rank fusion'
    """
    file = existing_file(path)
    return [html_document(_read(file, str(file), max_file_size, None), str(file))]


def load_pdf(
    path: str | os.PathLike[str], *, max_file_size: int = DEFAULT_MAX_FILE_SIZE
) -> list[Document]:
    """One Document per PDF page that has text (PyMuPDF), ``page`` counted from 0.

    Pages without extractable text (scans) are skipped with a warning.

    >>> [page.metadata["page"] for page in load_pdf("paper.pdf")]  # doctest: +SKIP
    [0, 1, 2]
    """
    file = existing_file(path)
    return pdf_documents(_read(file, str(file), max_file_size, None), str(file))


def load_beir_corpus(
    path: str | os.PathLike[str], *, max_file_size: int = DEFAULT_MAX_FILE_SIZE
) -> list[Document]:
    """Documents from a BEIR ``corpus.jsonl`` (``_id``, ``title``, ``text`` per line), streamed.

    ``page_content`` is the title and the text on separate lines; ``Document.id`` and
    ``metadata["doc_id"]`` are the ``_id``, so evaluation can map chunks back to judged documents.

    >>> load_beir_corpus("scifact/corpus.jsonl")[0].id  # doctest: +SKIP
    '4983'
    """
    file = existing_file(path)
    return _beir_documents(file, str(file), max_file_size, None)


def pdf_documents(data: bytes, source: str) -> list[Document]:
    """One Document per page of the PDF ``data`` that has text; ``source`` names them.

    Refused (UnreadableSourceError naming the bound) past :data:`MAX_PDF_CHARACTERS` of text or
    :data:`PDF_TIME_BUDGET` seconds of reading.
    """
    try:
        import pymupdf
    except ImportError as error:
        raise ImportError(missing_extra("pymupdf", "ingest")) from error
    if not data:
        raise UnreadableSourceError(source, "empty PDF")
    try:
        with pymupdf.open(stream=data, filetype="pdf") as pdf:
            pages = _bounded_pages(pdf, source)
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
    if len(documents) < len(pages):
        warnings.warn(
            f"{source}: {len(pages) - len(documents)} of {len(pages)} pages have no text "
            "(scanned images?) and were skipped",
            stacklevel=3,
        )
    return documents


def _bounded_pages(pdf: Any, source: str) -> list[str]:
    """The cleaned text of each page, within the character and time bounds of one PDF."""
    deadline = time.monotonic() + PDF_TIME_BUDGET
    pages: list[str] = []
    characters = 0
    for page in pdf:
        if time.monotonic() > deadline:
            raise UnreadableSourceError(
                source, f"PDF pages take longer than the {PDF_TIME_BUDGET:g} s limit to read"
            )
        pages.append(clean_text(page.get_text()))
        characters += len(pages[-1])
        if characters > MAX_PDF_CHARACTERS:
            raise UnreadableSourceError(
                source, f"PDF text beyond the {MAX_PDF_CHARACTERS:,}-character limit"
            )
    return pages


def clean_text(text: str) -> str:
    """``text`` without terminal escape sequences and control characters (tab, ``\\n`` and
    ``\\r`` kept): a document cannot recolour a terminal or leave ``31m`` in its words.

    >>> clean_text("\\x1b[31mRED TEXT\\x1b[0m\\x00 ok")
    'RED TEXT ok'
    """
    return _CONTROL_CHARACTER.sub("", _TERMINAL_ESCAPE.sub("", text))


def html_document(
    markup: str | bytes,
    source: str,
    *,
    encoding: str | None = None,
    classes: Sequence[str] | None = None,
) -> Document:
    """The Document of an HTML page: its main text (or ``classes``' text), its ``title`` in
    metadata; NoTextError if it has no text."""
    if len(markup) > MAX_HTML_SIZE:
        raise UnreadableSourceError(
            source, f"HTML larger than the {byte_size(MAX_HTML_SIZE)} parse limit"
        )
    try:
        page = html_to_text(markup, encoding=encoding, classes=classes)
    except HtmlLimitError as error:
        raise UnreadableSourceError(source, str(error)) from error
    if not page.text:
        raise NoTextError(source, "no text found")
    title = clean_text(page.title)
    metadata = {"source": source, "title": title} if title else {"source": source}
    return Document(page_content=clean_text(page.text), metadata=metadata, id=source)


def _text_document(data: bytes, source: str) -> Document:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UnreadableSourceError(
            source, "not UTF-8", f"byte {error.start}: {error.reason}"
        ) from error
    return Document(page_content=clean_text(text), metadata={"source": source}, id=source)


def _read(file: Path, source: str, max_file_size: int, identity: FileIdentity | None) -> bytes:
    with open_bounded(file, source, max_file_size, identity) as stream:
        data = stream.read(max_file_size + 1)
    if len(data) > max_file_size:  # grew after it was checked
        raise _too_large(source, max_file_size)
    return data


@contextlib.contextmanager
def open_bounded(
    file: Path, source: str, max_file_size: int, identity: FileIdentity | None
) -> Iterator[BinaryIO]:
    """``file`` opened for reading, once it is known to be a regular file within the size cap.

    Opened without blocking (a FIFO swapped in cannot hang the reader); ``identity``, when
    given, must match the file opened. OSError becomes UnreadableSourceError.
    """
    check_max_file_size(max_file_size)
    try:
        descriptor = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise UnreadableSourceError(source, "cannot be read", error.strerror or "") from error
    with os.fdopen(descriptor, "rb") as stream:
        status = os.fstat(descriptor)
        if identity is not None and (status.st_dev, status.st_ino) != identity:
            raise UnreadableSourceError(source, "changed while being read")
        if not stat.S_ISREG(status.st_mode):
            raise UnreadableSourceError(source, "not a regular file")
        if status.st_size > max_file_size:
            raise _too_large(source, max_file_size)
        try:
            yield stream
        except OSError as error:
            raise UnreadableSourceError(source, "cannot be read", error.strerror or "") from error


def check_max_file_size(max_file_size: int) -> None:
    """ValueError naming ``max_file_size`` unless it is a positive int (bytes)."""
    if isinstance(max_file_size, bool) or not isinstance(max_file_size, int) or max_file_size < 1:
        raise ValueError(f"max_file_size must be a positive int (bytes), got {max_file_size!r}")


def _too_large(source: str, max_file_size: int) -> UnreadableSourceError:
    return UnreadableSourceError(source, f"larger than the {byte_size(max_file_size)} limit")


def byte_size(count: int) -> str:
    """A byte count for people.

    >>> byte_size(50_000_000), byte_size(1500), byte_size(12)
    ('50 MB', '1.5 kB', '12 bytes')
    """
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if count >= size:
            return f"{count / size:g} {unit}"
    return f"{count} bytes"


def _beir_documents(
    file: Path, source: str, max_file_size: int, identity: FileIdentity | None
) -> list[Document]:
    documents: list[Document] = []
    seen: set[str] = set()
    size = 0
    with open_bounded(file, source, max_file_size, identity) as stream:
        for number, raw in enumerate(stream, start=1):
            size += len(raw)
            if size > max_file_size:
                raise _too_large(source, max_file_size)
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise UnreadableSourceError(source, f"line {number} is not UTF-8") from error
            if not line.strip():
                continue
            document = _beir_document(line, source, number)
            if document.id in seen:
                raise UnreadableSourceError(f"{source}:{number}", f"duplicate _id {document.id!r}")
            seen.add(str(document.id))
            documents.append(document)
    return documents


def _beir_document(line: str, source: str, number: int) -> Document:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise UnreadableSourceError(f"{source}:{number}", "invalid JSON", str(error)) from error
    if not isinstance(record, dict) or "_id" not in record:
        raise UnreadableSourceError(
            f"{source}:{number}", "expected a JSON object with an '_id' key"
        )
    doc_id = str(record["_id"])
    title = str(record.get("title") or "").strip()
    text = str(record.get("text") or "")
    given_metadata = record.get("metadata")
    extra = given_metadata if isinstance(given_metadata, dict) else {}
    metadata = {**extra, "doc_id": doc_id, "title": title, "source": source}
    content = clean_text(f"{title}\n{text}" if title else text)
    return Document(page_content=content, metadata=metadata, id=doc_id)


def existing_path(path: str | os.PathLike[str]) -> Path:
    """``path`` (``~`` expanded) if it exists, else FileNotFoundError naming it."""
    resolved = Path(path).expanduser()
    if not resolved.exists():
        raise FileNotFoundError(f"no such file or directory: {resolved}")
    return resolved


def existing_file(path: str | os.PathLike[str]) -> Path:
    """``path`` if it is an existing file, else FileNotFoundError or ValueError."""
    file = existing_path(path)
    if not file.is_file():
        raise ValueError(f"not a file: {file}")
    return file
