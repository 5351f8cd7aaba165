"""Parsing a model's output into search queries: numbered or bulleted lists, JSON, preambles,
emphasis; each query cleaned of terminal escapes and control characters and bounded in length.

>>> QueryListParser().parse("Here are the queries:\\n1. **solar power**\\n2. wind power")
['solar power', 'wind power']
"""

from __future__ import annotations

import json
import re
import unicodedata
import warnings

from langchain_core.output_parsers import BaseOutputParser

from rag_fusion_chain.validation import MAX_QUESTION_CHARS, TERMINAL_ESCAPE

MAX_OUTPUT_CHARS = 100_000
"""Default bound on the model output a :class:`QueryListParser` reads (about 25k tokens)."""

_LIST_MARKER = re.compile(
    r"""(?:
        [-*+>]\s+ | [•·▪◦]\s*                        # bullets and quote marks
      | \(?\d{1,3}\s*[.)、:：．]\s*                     # 1.  1)  (1.  3、
      | \(\d{1,3}\)\s* | （\d{1,3}）\s*                 # (1)  （1）
      | [\u2460-\u2473\u2776-\u277f]\s*                # ①..⑳ ❶..❿
      | [一二三四五六七八九十]{1,3}\s*[、.．:：]\s*       # 一、
      | (?:query|q|问题|查询)\s*\d{1,3}\s*[.:：)]\s*     # Query 1:  问题1：
    )+""",  # every alternative starts with a non-space character: no backtracking between them
    re.VERBOSE | re.IGNORECASE,
)
_WRAPPERS = [
    *((mark, mark) for mark in ("**", "__", "*", "_", "`", '"', "'")),  # "**" before "*"
    *zip("“‘「『《", "”’」』》", strict=True),  # (opening, closing)
]
_WRAPPER_STARTS = frozenset(opening[0] for opening, _ in _WRAPPERS)
_INLINE_EMPHASIS = re.compile(r"(\*\*|__)(.+?)\1")
_JSON_OPENING = re.compile(r"^[^\S\n]*(?:\[|\{|```)", re.MULTILINE)  # a JSON list, object or fence
_LETTER_OR_DIGIT = re.compile(r"[^\W_]")  # a character str.isalnum() accepts (re's \w less "_")


def searchable_text(text: str, *, single_line: bool = True) -> str:
    """``text`` without terminal escape sequences and control or format characters.

    Models can emit NUL, ANSI colour codes, bidirectional overrides (U+202E) and zero-width
    characters; none of them helps a search, and they hide or disguise text wherever queries
    are shown. Tabs and other control whitespace become spaces, and line breaks too when
    ``single_line``. Applied to every generated query and passage before it is searched.

    >>> searchable_text("\\x1b[31msolar\\x1b[0m\\u202e power\\u200b\\x00")
    'solar power'
    """
    if text.isprintable():
        return text
    kept = []
    for character in TERMINAL_ESCAPE.sub("", text):
        if character == "\n" and not single_line:
            kept.append(character)
        elif character.isspace():
            kept.append(" ")
        elif character.isprintable() or unicodedata.category(character) not in ("Cc", "Cf", "Cs"):
            kept.append(character)  # printable, or private-use / unassigned: text, not control
    return "".join(kept)


def within_query_limit(text: str) -> str:
    """``text``, cut to :data:`MAX_QUESTION_CHARS` with a warning when longer: a generated
    query is searched under the same bound as a question."""
    if len(text) <= MAX_QUESTION_CHARS:
        return text
    warnings.warn(
        f"a generated query of {len(text)} characters was cut to its first "
        f"{MAX_QUESTION_CHARS} (the question length limit) before searching",
        stacklevel=2,
    )
    return text[:MAX_QUESTION_CHARS].rstrip()


def clean_query_line(line: str) -> str:
    """Strip control characters (:func:`searchable_text`), list markers, markdown emphasis and
    surrounding quotes from one line.

    >>> clean_query_line('2) **"How do vaccines work?"**')
    'How do vaccines work?'
    >>> clean_query_line("一、光伏发电的效率")
    '光伏发电的效率'
    """
    text = unicodedata.normalize("NFC", searchable_text(line))
    text = _INLINE_EMPHASIS.sub(r"\2", text)
    if text == text.strip() and text[:1] not in _WRAPPER_STARTS and not _LIST_MARKER.match(text):
        return text  # nothing to strip (what the prompts ask for): the loop would change nothing
    # Indices instead of sliced copies: a line of thousands of markers or quotes stays linear.
    start, end = _strip_span(text, 0, len(text))
    previous = None
    while (start, end) != previous:
        previous = (start, end)
        marker = _LIST_MARKER.match(text, start, end)
        if marker is not None:
            start, end = _strip_span(text, marker.end(), end)
        wrapped = start < end and text[start] in _WRAPPER_STARTS
        for opening, closing in _WRAPPERS if wrapped else ():
            if (
                end - start > len(opening) + len(closing)
                and text.startswith(opening, start, end)
                and text.endswith(closing, start, end)
            ):
                start, end = _strip_span(text, start + len(opening), end - len(closing))
    return text[start:end]


def _strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    """``start, end`` moved past the whitespace at both ends of ``text[start:end]``."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def dedupe_key(query: str) -> str:
    """Queries equal ignoring case and spacing share this key."""
    return "".join(query.split()).casefold()


def _json_queries(text: str) -> list[str] | None:
    """Queries from a JSON list, or from the first list value of a JSON object; else None."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(stripped)
    except (ValueError, RecursionError):  # nested beyond the parser's depth: read as lines
        return None
    if isinstance(data, dict):
        data = next((value for value in data.values() if isinstance(value, list)), None)
    if not isinstance(data, list):
        return None
    return [
        item if isinstance(item, str) else json.dumps(item, ensure_ascii=False) for item in data
    ]


class QueryListParser(BaseOutputParser[list[str]]):
    """Turn model text into clean queries: one per line, numbering, bullets, quotes, markdown
    emphasis and preamble lines removed, de-duplicated ignoring case and spacing, at most ``n``.
    A JSON list (or an object holding one), after any preamble lines, is read too. At most
    ``max_chars`` characters are read (a runaway model), with a warning when more came.

    >>> QueryListParser(n=2).parse("Here are 2 queries:\\n1. Solar power\\n2. solar  POWER\\n3. Wind")
    ['Solar power', 'Wind']
    """

    n: int | None = None
    max_chars: int = MAX_OUTPUT_CHARS

    @property
    def _type(self) -> str:
        return "query_list"

    def parse(self, text: str) -> list[str]:
        if len(text) > self.max_chars:
            warnings.warn(
                f"the model output is longer than max_chars={self.max_chars} characters; "
                "the rest was not parsed for queries",
                stacklevel=2,
            )
            text = text[: self.max_chars]
        opening = _JSON_OPENING.search(text)
        items = None if opening is None else _json_queries(text[opening.start() :])
        # the lines before a JSON list, else all of them (JSON that does not parse: read as lines)
        lines = (text if opening is None or items is None else text[: opening.start()]).split("\n")
        queries: dict[str, str] = {}  # by dedupe key, first spelling kept
        for index, candidate in enumerate([*lines, *(items or ())]):
            if self.n is not None and len(queries) >= self.n:
                break
            visible = searchable_text(candidate)
            if index < len(lines) and visible.rstrip().endswith((":", "：")):
                continue  # a preamble line such as "Here are 4 search queries:"
            query = clean_query_line(visible)
            if _LETTER_OR_DIGIT.search(query):  # not blank nor symbols only
                query = within_query_limit(query)
                queries.setdefault(dedupe_key(query), query)
        return list(queries.values())
