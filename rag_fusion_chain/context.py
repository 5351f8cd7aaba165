"""Quoting retrieved passages to a model: numbered ``<passage>`` blocks, their text escaped."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

from langchain_core.documents import Document

NO_PASSAGES = "(no passages were found)"
NO_EARLIER_ANSWERS = "(none yet)"

_CHAT_MARKERS = re.compile(r"\[\s*/?\s*(INST|SYS)\s*\]", re.IGNORECASE)
"""Llama-style ``[INST]`` / ``[/INST]`` markers (``<<SYS>>`` and ``<|...|>`` lose their ``<``)."""
_QUOTE = str.maketrans({'"': "&quot;"})
"""A shown source's ``"`` escaped, as it is quoted in the ``source="..."`` attribute."""


def escape_for_prompt(text: str) -> str:
    """``text`` safe to quote inside a prompt's tags: NFKC-normalised (fullwidth ``＜`` is ``<``),
    control and format characters (NUL, zero-width, soft hyphen, bidi) other than newline and tab
    removed, every ``<`` / ``>`` escaped (no ``</passage>``, ``<|im_end|>`` or look-alike
    survives) and ``[INST]``-style markers bracketed away.

    >>> escape_for_prompt("end</pas\u00adsage>\uff1c|im_start|\uff1e [INST]")
    'end&lt;/passage&gt;&lt;|im_start|&gt; (INST)'
    """
    normal = unicodedata.normalize("NFKC", text)
    plain = "".join(c for c in normal if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf"))
    escaped = plain.replace("<", "&lt;").replace(">", "&gt;")
    return _CHAT_MARKERS.sub(r"(\1)", escaped)


def shown_source(source: object) -> str:
    """A document's source as shown to the model and in served sources: never an absolute path.

    >>> shown_source("/home/me/notes/kelp.txt"), shown_source("notes/kelp.txt")
    ('kelp.txt', 'notes/kelp.txt')
    """
    text = str(source)
    path = PureWindowsPath(text) if PureWindowsPath(text).drive else PurePosixPath(text)
    return path.name if path.is_absolute() or text.startswith("~") else text


def passage_numbers(documents: Iterable[Document]) -> dict[str, int]:
    """Each distinct passage (by text) numbered from 1 in order of first appearance."""
    texts = dict.fromkeys(document.page_content for document in documents)
    return {text: number for number, text in enumerate(texts, 1)}


def format_context(
    documents: Sequence[Document], *, start: int = 1, numbers: Mapping[str, int] | None = None
) -> str:
    """Number the documents from ``start`` (or by text: ``numbers``, from :func:`passage_numbers`)
    and quote each as ``<passage id="1" source="...">`` (``metadata["source"]``, else
    ``Document.id``, else no source); :data:`NO_PASSAGES` if none.

    >>> print(format_context([Document("Heat pumps move heat.", metadata={"source": "a.txt"})]))
    <passage id="1" source="a.txt">
    Heat pumps move heat.
    </passage>
    """
    passages = []
    for number, document in enumerate(documents, start):
        source = document.metadata.get("source") or document.id
        attributes = f'id="{number if numbers is None else numbers[document.page_content]}"'
        if source:
            attributes += f' source="{escape_for_prompt(shown_source(source)).translate(_QUOTE)}"'
        text = escape_for_prompt(document.page_content)
        passages.append(f"<passage {attributes}>\n{text}\n</passage>")
    return "\n\n".join(passages) or NO_PASSAGES


def format_answered(answered: Sequence[Mapping[str, Any]]) -> str:
    """Sub-questions and their answers, numbered, for the recursive and synthesis prompts.

    >>> format_answered([{"question": "What is RRF?", "answer": "A fusion."}])
    'Sub-question 1: What is RRF?\\nAnswer: A fusion.'
    """
    answers = "\n\n".join(
        f"Sub-question {number}: {escape_for_prompt(str(item['question']))}\n"
        f"Answer: {escape_for_prompt(str(item['answer']))}"
        for number, item in enumerate(answered, 1)
    )
    return answers or NO_EARLIER_ANSWERS
