"""Load many sources of any kind: http(s) URLs, folders, PDF, HTML, BEIR ``.jsonl``, text.

Sources are checked first (a missing path or a malformed URL is an error before anything is
read). Then a source that cannot be used is skipped, warned (:class:`SkippedSourceWarning`) and
listed in the result, so one bad file does not cost the others; ``strict=True`` raises instead.
Loading nothing at all is a ValueError that says which files are read.

Files are named without the user's absolute paths: a file given alone by its name (``a.md``), a
file in a folder by the folder's name and its path inside (``docs/a.md``). When two sources
would share a name (two folders called ``docs``), those are named by their paths as given.

>>> result = load_with_report(["notes/", "https://example.org/"])  # doctest: +SKIP
>>> len(result.documents), result.skipped  # doctest: +SKIP
(41, [Skipped(source='notes/a.txt', reason='not UTF-8')])
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from rag_fusion_chain.ingest.files import (
    BEIR_EXTENSIONS,
    DEFAULT_MAX_FILE_SIZE,
    check_max_file_size,
    existing_path,
    load_file,
)
from rag_fusion_chain.ingest.folders import DIRECTORY_EXTENSIONS, add_directory, folder_name
from rag_fusion_chain.ingest.problems import LoadResult, describe_skipped, display_name
from rag_fusion_chain.ingest.web import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT,
    check_fetch_limits,
    check_web_url,
    load_url,
)

ACCEPTED_SOURCES = (
    f"folders (read for {', '.join(DIRECTORY_EXTENSIONS)} files), those files alone, "
    f"BEIR {', '.join(BEIR_EXTENSIONS)} corpora, other UTF-8 text files, and http(s) URLs"
)
"""What can be loaded, in words for error messages."""


def load(sources: Sequence[str | os.PathLike[str]], **options: Any) -> list[Document]:
    """The documents of :func:`load_with_report` (same options); skipped sources are warned.

    >>> documents = load(["https://example.org/post.html", "docs/", "corpus.jsonl"])  # doctest: +SKIP
    """
    return load_with_report(sources, **options).documents


def load_with_report(
    sources: Sequence[str | os.PathLike[str]],
    *,
    strict: bool = False,
    follow_symlinks: bool = False,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
    deny_private: bool | None = None,
    on_source: Callable[[str], None] | None = None,
) -> LoadResult:
    """Load each source by its kind; return the documents, the sources read and those skipped.

    ``strict``: raise the first problem instead of skipping. ``follow_symlinks``: let folder
    walks follow links out of the folder. ``max_file_size``: bytes, larger files are skipped.
    ``timeout`` (seconds, whole fetch), ``max_bytes`` and ``deny_private``: for URLs, see
    :func:`load_web`. ``on_source(source)`` is called as each source is done (for progress
    bars). FileNotFoundError for a missing path, ValueError for a malformed URL or
    when no documents were loaded at all.

    >>> result = load_with_report(["docs/"])  # doctest: +SKIP
    >>> result.loaded, result.skipped  # doctest: +SKIP
    (['docs/a.md'], [Skipped(source='docs/b.pdf', reason='corrupt PDF')])
    """
    if isinstance(sources, (str, os.PathLike)):
        raise TypeError("sources must be a list of paths or URLs, not a single string")
    check_fetch_limits(timeout, max_bytes)
    check_max_file_size(max_file_size)
    checked = [_checked(source) for source in sources]
    names = _shown_names(checked)
    result = LoadResult()
    for source, name in zip(checked, names, strict=True):
        if isinstance(source, str):
            fetch = functools.partial(
                load_url, source, timeout=timeout, max_bytes=max_bytes, deny_private=deny_private
            )
            result.add(source, fetch, strict=strict)
        elif source.is_dir():
            add_directory(
                result,
                source,
                follow_symlinks=follow_symlinks,
                max_file_size=max_file_size,
                strict=strict,
                shown_as=name,
            )
        else:
            read = functools.partial(load_file, source, max_file_size=max_file_size, source=name)
            result.add(display_name(name), read, strict=strict)
        if on_source is not None:
            on_source(display_name(source))
    if not result.documents:
        raise ValueError(_nothing_loaded(sources, result))
    return result


def _shown_names(checked: Sequence[str | Path]) -> list[str]:
    """The name each source is shown under: a URL as itself, a path by its last part, or by
    the path as given when two sources share that last part."""
    last_parts = [source if isinstance(source, str) else folder_name(source) for source in checked]
    repeated = {name for name, count in Counter(last_parts).items() if count > 1}
    return [
        name if isinstance(source, str) or name not in repeated else str(source)
        for source, name in zip(checked, last_parts, strict=True)
    ]


def _checked(source: str | os.PathLike[str]) -> str | Path:
    """A URL (checked) as a string, or an existing path."""
    text = os.fspath(source)
    if "://" in text:
        check_web_url(text)
        return text
    return existing_path(text)


def _nothing_loaded(sources: Sequence[str | os.PathLike[str]], result: LoadResult) -> str:
    named = ", ".join(display_name(source) for source in sources) or "no sources given"
    if result.skipped:
        return f"nothing could be loaded from {named}: skipped {describe_skipped(result.skipped)}"
    return f"no documents found in {named}. Accepted: {ACCEPTED_SOURCES}"
