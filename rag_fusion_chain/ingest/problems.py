"""What loading reports: sources that could not be used, and the result of loading many sources.

A loader of one source raises a :class:`SourceProblem` (an unreadable, undecodable, unparsable,
too large or refused file or page). A loader of many sources (a folder, :func:`load_with_report`)
skips such a source, warns with a :class:`SkippedSourceWarning`, and lists it in
:attr:`LoadResult.skipped`; with ``strict=True`` it raises the problem instead.

>>> result = LoadResult()
>>> result.skip("a.txt", "not UTF-8", strict=False)  # doctest: +SKIP
>>> describe_skipped(result.skipped)  # doctest: +SKIP
'a.txt (not UTF-8)'
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from langchain_core.documents import Document

from rag_fusion_chain.validation import redact_credentials


class SourceProblem(Exception):
    """A source that cannot be used; ``reason`` is short enough for a one-line summary.

    A URL's ``user:password@`` never reaches the source, reason or message (they are shown and
    stored: skip reports, warnings, index records).
    """

    def __init__(self, source: str, reason: str, detail: str = "") -> None:
        self.source = redact_credentials(source)
        self.reason = redact_credentials(reason)
        shown_detail = f" ({redact_credentials(detail)})" if detail else ""
        super().__init__(f"{self.source}: {self.reason}{shown_detail}")


class UnreadableSourceError(SourceProblem, ValueError):
    """A file or page that cannot be read, decoded or parsed, is too large or is refused."""


class NoTextError(UnreadableSourceError):
    """A page or file that was read but holds no text (after markup was removed)."""


class SourceTimeoutError(SourceProblem, TimeoutError):
    """A URL that did not answer in time."""


class SourceConnectionError(SourceProblem, ConnectionError):
    """A URL that could not be fetched (refused connection, bad redirect, TLS error...)."""


class SkippedSourceWarning(UserWarning):
    """A source was skipped; the reason is in the message and in :attr:`LoadResult.skipped`."""


@dataclass(frozen=True)
class Skipped:
    """A source that was not loaded, and why (``"not UTF-8"``, ``"corrupt PDF"``...)."""

    source: str
    reason: str


@dataclass
class LoadResult:
    """The documents loaded, the sources (files, URLs) they came from, and the sources skipped."""

    documents: list[Document] = field(default_factory=list)
    loaded: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def add(self, source: str, load: Callable[[], list[Document]], *, strict: bool) -> None:
        """Keep what ``load()`` returns for ``source``, or skip its problem (raised if strict)."""
        try:
            documents = load()
        except SourceProblem as problem:
            if strict:
                raise
            self._record(Skipped(problem.source, problem.reason))
            return
        self.documents.extend(documents)
        self.loaded.append(source)

    def skip(self, source: str, reason: str, *, strict: bool) -> None:
        """Skip ``source`` for ``reason`` (warned and recorded), or raise it if ``strict``."""
        if strict:
            raise UnreadableSourceError(source, reason)
        self._record(Skipped(source, reason))

    def _record(self, skipped: Skipped) -> None:
        self.skipped.append(skipped)
        warnings.warn(
            f"skipped {skipped.source} ({skipped.reason})", SkippedSourceWarning, stacklevel=4
        )


def describe_skipped(skipped: Sequence[Skipped]) -> str:
    """The skipped sources for one line of a summary.

    >>> describe_skipped([Skipped("a.txt", "not UTF-8"), Skipped("b.pdf", "corrupt PDF")])
    'a.txt (not UTF-8), b.pdf (corrupt PDF)'
    """
    return ", ".join(f"{entry.source} ({entry.reason})" for entry in skipped)


def display_name(path: str | os.PathLike[str]) -> str:
    """``path`` as printable text: bytes that are not UTF-8 shown as ``\\xNN`` escapes.

    >>> display_name("caf\\udce9.txt")
    'caf\\\\xe9.txt'
    """
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def missing_extra(package: str, extra: str) -> str:
    """The ImportError message naming the extra that installs ``package``."""
    return f'{package} is not installed: pip install "rag-fusion-chain[{extra}]"'
