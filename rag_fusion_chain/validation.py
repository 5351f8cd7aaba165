"""Input checks every layer shares (the question, positive counts, URL credentials kept out of
what is shown, terminal escapes, optional dependencies named by their extra) and the kit's cache
folder; it imports nothing from the kit."""

from __future__ import annotations

import importlib
import os
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, StringConstraints, model_validator

QuestionInput = str | Mapping[str, Any]

MAX_QUESTION_CHARS = 20_000
"""Longer questions are refused: they would overflow the prompt of most chat models."""
MAX_QUERIES = 50
"""Upper bound for ``n``: more queries than this cost much and add little to fusion."""
KIT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rag-fusion-chain"
"""The kit's one cache folder: ``$XDG_CACHE_HOME`` (else ``~/.cache``) ``/rag-fusion-chain``."""
TERMINAL_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
    r"|\x9b[0-?]*[ -/]*[@-~]"  # CSI, 8-bit form
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks
    r"|\x1b[ -/]*[0-~]"  # other escape sequences
)
"""Terminal escape sequences: they hide or restyle text wherever it is shown."""


def environment_count(variable: str, default: int, environ: Mapping[str, str] = os.environ) -> int:
    """The positive integer in the environment variable ``variable``, else ``default``."""
    text = environ.get(variable, "").strip()
    if text and not (text.isdigit() and int(text) > 0):
        raise ValueError(f"{variable} must be a positive integer, got {text!r}")
    return int(text) if text else default


def question_of(value: QuestionInput) -> str:
    """Extract and validate the question from ``str`` or ``{"question": str}`` input.

    >>> question_of({"question": "  What is RRF? "})
    'What is RRF?'
    """
    if not isinstance(value, str):  # the question in a dict, else a TypeError
        if isinstance(value, Mapping):
            if "question" not in value:
                raise ValueError(
                    f"input dict needs a 'question' key, got keys {sorted(map(str, value))}"
                )
            value = value["question"]
        if not isinstance(value, str):
            raise TypeError(f"question must be a str, got {type(value).__name__}")
    question = value.strip()
    if not (0 < len(question) <= MAX_QUESTION_CHARS and question.isprintable()):  # else all pass
        if not any(unicodedata.category(character)[0] not in "CZ" for character in question):
            # nothing visible: empty, whitespace, or only control and zero-width format characters
            raise ValueError("question must not be empty or whitespace")
        try:
            question.encode("utf-8")
        except UnicodeEncodeError as error:  # a lone surrogate: no model or index can take it
            raise ValueError(
                f"question is not valid Unicode text ({error.reason} at position {error.start})"
            ) from None
        if len(question) > MAX_QUESTION_CHARS:
            raise ValueError(
                f"question is {len(question)} characters long; the limit is "
                f"{MAX_QUESTION_CHARS}. Summarise it first, or pass a shorter question"
            )
    return question


QuestionText = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_QUESTION_CHARS), AfterValidator(question_of)
]
"""The question itself, with the checks of every chain of the kit."""


class Question(BaseModel):
    """The input of a chain: ``{"question": str}``, or the question itself."""

    question: QuestionText = Field(description="The question to answer from the indexed documents")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        return {"question": value} if isinstance(value, str) else value


def validate_count(name: str, value: int, upper: int | None = None) -> int:
    """``value`` if a positive int (at most ``upper``), else TypeError/ValueError naming ``name``.

    >>> validate_count("k", 3)
    3
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0 or (upper is not None and value > upper):
        bound = "be positive" if value <= 0 else f"be at most {upper}"
        raise ValueError(f"{name} must {bound}, got {value}")
    return value


def counted(count: int, noun: str, plural: str = "") -> str:
    """``count`` and ``noun`` agreeing: ``1 query``, ``2 queries`` (``plural``; default noun + s)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


_URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#\s]*@")
"""A URL's ``user:password@`` (up to its last ``@`` before the path)."""


def redact_credentials(text: str) -> str:
    """``text`` with the user name and password of every URL in it replaced by ``***``.

    >>> redact_credentials("http://user:secret@localhost:8000/v1")
    'http://***@localhost:8000/v1'
    """
    return _URL_CREDENTIALS.sub(r"\g<scheme>***@", text)


def require_extra(module: str, extra: str) -> Any:
    """``module`` imported, else an ImportError naming the extra that installs it.

    >>> require_extra("json", "core").dumps([1])
    '[1]'
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        missing = error.name or module
        message = f'{missing} is not installed: pip install "rag-fusion-chain[{extra}]"'
        raise ImportError(message) from error
