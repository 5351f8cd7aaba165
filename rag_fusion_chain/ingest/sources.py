"""Load many sources of any kind (http(s) URLs, folders, files), skipping and reporting failures.

Sources are checked first (a missing path or a malformed URL is an error before anything is
read); then a source that cannot be used is skipped, warned and listed (``strict=True`` raises).
Files are named without the user's absolute paths: a file given alone by its name, a folder's
files by the folder's name and their path inside it (by the paths as given when two share it).
A folder walk is sorted, skips hidden entries and stays inside the folder unless
``follow_symlinks``: a link out of it is reported, and a file is read only if it is still the
file that was checked.
"""

from __future__ import annotations

import functools
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from langchain_core.documents import Document

from rag_fusion_chain.ingest.files import (
    DEFAULT_MAX_FILE_SIZE,
    KINDS,
    FileIdentity,
    check_max_file_size,
    existing_path,
    load_file,
)
from rag_fusion_chain.ingest.problems import (
    LoadResult,
    Skipped,
    UnreadableSourceError,
    describe_skipped,
    display_name,
)
from rag_fusion_chain.ingest.web import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT,
    check_fetch_limits,
    check_web_url,
    load_url,
)

DIRECTORY_EXTENSIONS = tuple(suffix for suffix, kind in KINDS.items() if kind != "beir")
"""The files a folder is read for (by default)."""
ACCEPTED_SOURCES = (
    f"folders (read for {', '.join(DIRECTORY_EXTENSIONS)} files), those files alone, "
    "BEIR .jsonl corpora, other UTF-8 text files, and http(s) URLs"
)


class FolderFile(NamedTuple):
    """A file found in a folder: its path there, its resolved path and its identity."""

    path: Path
    target: Path
    identity: FileIdentity


def load(sources: Sequence[str | os.PathLike[str]], **options: Any) -> list[Document]:
    """The documents of :func:`load_with_report` (same options); skipped sources are warned."""
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
    """Load each source by its kind: the documents, the sources read and those skipped.

    ``max_file_size`` caps each file (bytes); ``timeout``, ``max_bytes`` and ``deny_private``
    bound URL fetches (:func:`load_web`); ``on_source(name)`` is called as each source is done.
    FileNotFoundError for a missing path; ValueError for a malformed URL or when nothing loaded.
    """
    if isinstance(sources, (str, os.PathLike)):
        raise TypeError("sources must be a list of paths or URLs, not a single string")
    check_fetch_limits(timeout, max_bytes)
    check_max_file_size(max_file_size)
    checked = [_checked(source) for source in sources]
    result = LoadResult()
    for source, name in zip(checked, _shown_names(checked), strict=True):
        if isinstance(source, str):
            fetch = functools.partial(load_url, source, timeout, max_bytes, deny_private)
            result.add(source, fetch, strict=strict)
        elif source.is_dir():
            _add_directory(
                result, source, name, DIRECTORY_EXTENSIONS, follow_symlinks, max_file_size, strict
            )
        else:
            read = functools.partial(load_file, source, max_file_size=max_file_size, source=name)
            result.add(display_name(name), read, strict=strict)
        if on_source is not None:
            on_source(display_name(source))
    if not result.documents:
        named = ", ".join(display_name(source) for source in sources) or "no sources given"
        if result.skipped:
            raise ValueError(
                f"nothing could be loaded from {named}: skipped {describe_skipped(result.skipped)}"
            )
        raise ValueError(f"no documents found in {named}. Accepted: {ACCEPTED_SOURCES}")
    return result


def load_directory(
    path: str | os.PathLike[str],
    *,
    extensions: Iterable[str] = DIRECTORY_EXTENSIONS,
    follow_symlinks: bool = False,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    strict: bool = False,
) -> list[Document]:
    """Every file under a folder with one of ``extensions``; unusable files skipped and warned."""
    directory = existing_path(path)
    result = LoadResult()
    _add_directory(
        result,
        directory,
        _folder_name(directory),
        extensions,
        follow_symlinks,
        max_file_size,
        strict,
    )
    return result.documents


def _add_directory(
    result: LoadResult,
    directory: Path,
    shown_as: str,
    extensions: Iterable[str],
    follow_symlinks: bool,
    max_file_size: int,
    strict: bool,
) -> None:
    """Load the folder into ``result``, its files named under ``shown_as`` by their path in it."""
    if not directory.is_dir():
        raise ValueError(f"not a directory: {directory}")
    wanted = {extension.lower() for extension in extensions}
    for found in walk(directory, wanted, follow_symlinks=follow_symlinks):
        if isinstance(found, Skipped):
            inside = Path(found.source).relative_to(display_name(directory))
            problem = UnreadableSourceError(str(Path(shown_as) / inside), found.reason)
            result.skip(problem, strict=strict)
            continue
        name = str(Path(shown_as) / found.path.relative_to(directory))
        load = functools.partial(
            load_file,
            found.target,
            max_file_size=max_file_size,
            identity=found.identity,
            source=name,
        )
        result.add(display_name(name), load, strict=strict)


def walk(
    directory: Path, wanted: set[str], *, follow_symlinks: bool = False
) -> Iterator[FolderFile | Skipped]:
    """The files under ``directory`` with a ``wanted`` suffix, and the entries skipped."""
    root = directory.resolve()
    yield from _walk(directory, root, wanted, follow_symlinks, {root})


def _walk(
    directory: Path, root: Path, wanted: set[str], follow_symlinks: bool, seen: set[Path]
) -> Iterator[FolderFile | Skipped]:
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as error:
        yield Skipped(display_name(directory), f"folder cannot be read ({error.strerror})")
        return
    for entry in entries:
        path = Path(entry.path)
        if entry.name.startswith("."):
            continue
        try:
            target = path.resolve(strict=True)
            status = target.stat()
        except (OSError, RuntimeError):  # a broken link or a link loop
            if path.suffix.lower() in wanted:
                yield Skipped(display_name(path), "broken link")
            continue
        is_folder = stat.S_ISDIR(status.st_mode)
        if not is_folder and path.suffix.lower() not in wanted:
            continue
        if not follow_symlinks and not target.is_relative_to(root):
            yield Skipped(display_name(path), "link to outside the folder")
        elif is_folder:
            if target not in seen:  # linked folders are walked once: no loops
                seen.add(target)
                yield from _walk(path, root, wanted, follow_symlinks, seen)
        elif stat.S_ISREG(status.st_mode):
            yield FolderFile(path, target, (status.st_dev, status.st_ino))
        else:
            yield Skipped(display_name(path), "not a regular file")


def _folder_name(directory: Path) -> str:
    return directory.name or directory.resolve().name


def _shown_names(checked: Sequence[str | Path]) -> list[str]:
    """A URL as itself, a path by its last part, or as given when two share that last part."""
    last_parts = [source if isinstance(source, str) else _folder_name(source) for source in checked]
    repeated = {name for name, count in Counter(last_parts).items() if count > 1}
    return [
        str(source) if name in repeated and not isinstance(source, str) else name
        for source, name in zip(checked, last_parts, strict=True)
    ]


def _checked(source: str | os.PathLike[str]) -> str | Path:
    """A URL (checked) as a string, or an existing path."""
    text = os.fspath(source)
    if "://" in text:
        check_web_url(text)
        return text
    return existing_path(text)
