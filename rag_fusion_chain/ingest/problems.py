"""Sources that cannot be used, and the report of loading many: skipped, warned and listed."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from langchain_core.documents import Document

from rag_fusion_chain.validation import redact_credentials


class SourceProblem(Exception):
    """A source that cannot be used, and why; a URL's ``user:password@`` is never shown."""

    def __init__(self, source: str, reason: str, detail: str = "") -> None:
        self.source = redact_credentials(source)
        self.reason = redact_credentials(reason)
        shown_detail = f" ({redact_credentials(detail)})" if detail else ""
        super().__init__(f"{self.source}: {self.reason}{shown_detail}")


class UnreadableSourceError(SourceProblem, ValueError):
    """A file or page that cannot be read, decoded or parsed, is too large or is refused."""


class NoTextError(UnreadableSourceError):
    """A page or file that was read but holds no text."""


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


FileStamp = tuple[int, int, int, int]
"""A file's ``(st_size, st_mtime_ns, st_ctime_ns, st_ino)``: what changes when its content does."""


@dataclass
class LoadResult:
    """The documents loaded, the sources (files, URLs) they came from, and the sources skipped;
    the files found unchanged (not read: no documents), and each file's stamp."""

    documents: list[Document] = field(default_factory=list)
    loaded: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    stamps: dict[str, FileStamp] = field(default_factory=dict)

    def add(self, source: str, load: Callable[[], list[Document]], *, strict: bool) -> None:
        """Keep what ``load()`` returns for ``source``, or skip its problem (raised if strict)."""
        try:
            self.documents.extend(load())
            self.loaded.append(source)
        except SourceProblem as problem:
            self.skip(problem, strict=strict)

    def skip(self, problem: SourceProblem, *, strict: bool) -> None:
        if strict:
            raise problem
        self.skipped.append(Skipped(problem.source, problem.reason))
        warnings.warn(f"skipped {problem}", SkippedSourceWarning, stacklevel=4)


def describe_skipped(skipped: Sequence[Skipped]) -> str:
    """The skipped sources for one line of a summary: ``a.txt (not UTF-8), b.pdf (corrupt PDF)``."""
    return ", ".join(f"{entry.source} ({entry.reason})" for entry in skipped)


def display_name(path: str | os.PathLike[str]) -> str:
    """``path`` as printable text: bytes that are not UTF-8 shown as ``\\xNN`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")
