"""Load a folder: every file of the accepted kinds under it, without leaving it.

The walk is recursive, sorted, skips hidden entries (names starting with ``.``) and stays
inside the folder: each entry's resolved path is checked, so a link pointing out of the folder
(to a key file, say) is skipped and reported, unless ``follow_symlinks=True``. A file is read
only if it is still the file that was checked. Linked folders are walked once (no loops).

Files are named (``metadata["source"]``, ids, skip reports) by their path inside the folder under
the folder's own name: ``docs/a.md`` for ``"docs/"`` as for ``"/home/me/docs"``, so that no
absolute path of the user's reaches a prompt, a trace or a screen.

>>> documents = load_directory("notes")  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from langchain_core.documents import Document

from rag_fusion_chain.ingest.files import (
    DEFAULT_MAX_FILE_SIZE,
    HTML_EXTENSIONS,
    PDF_EXTENSIONS,
    TEXT_EXTENSIONS,
    FileIdentity,
    existing_path,
    load_file,
)
from rag_fusion_chain.ingest.problems import LoadResult, Skipped, display_name

DIRECTORY_EXTENSIONS = TEXT_EXTENSIONS + HTML_EXTENSIONS + PDF_EXTENSIONS
"""The files a folder is read for (by default)."""


@dataclass(frozen=True)
class FolderFile:
    """A file found in a folder: its path there, its resolved path and its identity."""

    path: Path
    target: Path
    identity: FileIdentity


def load_directory(
    path: str | os.PathLike[str],
    *,
    extensions: Iterable[str] = DIRECTORY_EXTENSIONS,
    follow_symlinks: bool = False,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    strict: bool = False,
) -> list[Document]:
    """Every file under a folder with one of ``extensions``; unusable files skipped and warned.

    ``strict=True`` raises the first problem instead; :func:`load_with_report` returns the list
    of skipped files as data.

    >>> load_directory("docs", extensions=[".md"])  # doctest: +SKIP
    """
    result = LoadResult()
    add_directory(
        result,
        path,
        extensions=extensions,
        follow_symlinks=follow_symlinks,
        max_file_size=max_file_size,
        strict=strict,
    )
    return result.documents


def add_directory(
    result: LoadResult,
    path: str | os.PathLike[str],
    *,
    extensions: Iterable[str] = DIRECTORY_EXTENSIONS,
    follow_symlinks: bool = False,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    strict: bool = False,
    shown_as: str | None = None,
) -> None:
    """Load the folder ``path`` into ``result`` (documents, loaded files, skipped files).

    Files are named under ``shown_as`` (default: the folder's name) by their path inside it.
    """
    directory = existing_path(path)
    if not directory.is_dir():
        raise ValueError(f"not a directory: {directory}")
    shown = Path(shown_as if shown_as is not None else folder_name(directory))
    wanted = {extension.lower() for extension in extensions}
    for found in walk(directory, wanted, follow_symlinks=follow_symlinks):
        if isinstance(found, Skipped):
            inside = Path(found.source).relative_to(display_name(directory))
            result.skip(str(shown / inside), found.reason, strict=strict)
            continue
        name = str(shown / found.path.relative_to(directory))
        load = functools.partial(
            load_file,
            found.target,
            max_file_size=max_file_size,
            identity=found.identity,
            source=name,
        )
        result.add(display_name(name), load, strict=strict)


def folder_name(directory: Path) -> str:
    """The name a folder's files are shown under: its own name (``"."`` resolved)."""
    return directory.name or directory.resolve().name


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
        if entry.name.startswith("."):
            continue
        path = Path(entry.path)
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
            if target not in seen:
                seen.add(target)
                yield from _walk(path, root, wanted, follow_symlinks, seen)
        elif stat.S_ISREG(status.st_mode):
            yield FolderFile(path, target, (status.st_dev, status.st_ino))
        else:
            yield Skipped(display_name(path), "not a regular file")
