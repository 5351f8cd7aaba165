"""Load documents (web pages, PDF, HTML, text and markdown, folders, BEIR corpora) and split them;
files are named without the user's absolute paths (a folder's name and the path inside it)."""

from __future__ import annotations

import functools
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from rag_fusion_chain.ingest.files import (
    DEFAULT_MAX_FILE_SIZE,
    KINDS,
    FileIdentity,
    existing_path,
    load_file,
    load_pdf,
)
from rag_fusion_chain.ingest.problems import (
    FileStamp,
    LoadResult,
    Skipped,
    SkippedSourceWarning,
    UnreadableSourceError,
    describe_skipped,
    display_name,
)
from rag_fusion_chain.ingest.splitting import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    count_tokens,
    split_documents,
)
from rag_fusion_chain.ingest.web import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT,
    DENY_PRIVATE_ENV,
    check_fetch_limits,
    check_web_url,
    load_url,
    load_web,
)
from rag_fusion_chain.validation import redact_credentials, validate_count

DIRECTORY_EXTENSIONS = tuple(suffix for suffix, kind in KINDS.items() if kind != "beir")


def load(sources: Sequence[str | os.PathLike[str]], **options: Any) -> list[Document]:
    """The documents of :func:`load_with_report` (same options); skipped sources are warned."""
    return load_with_report(sources, **options).documents


def load_with_report(
    sources: Sequence[str | os.PathLike[str]],
    *,
    strict: bool = False,
    follow_symlinks: bool = False,
    extensions: Iterable[str] = DIRECTORY_EXTENSIONS,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
    deny_private: bool | None = None,
    on_source: Callable[[str], None] | None = None,
    unchanged: Callable[[str, FileStamp], bool] | None = None,
) -> LoadResult:
    """The documents of each source (all checked before any is read), the sources read and those
    skipped (warned; raised if ``strict``); ValueError if none loaded. ``on_source`` per source.
    A URL or file given twice (two paths, or alone and in a folder) is read once, by its first name.
    A file for which ``unchanged(name, stamp)`` is true is listed as loaded and unchanged, unread."""
    if isinstance(sources, (str, os.PathLike)):
        raise TypeError("sources must be a list of paths or URLs, not a single string")
    check_fetch_limits(timeout, max_bytes)
    validate_count("max_file_size", max_file_size)
    checked: list[str | Path] = []  # URLs checked, paths found: all before any is read
    for text in (os.fspath(source) for source in sources):
        if "://" in text:
            check_web_url(text)
        checked.append(text if "://" in text else existing_path(text))
    last = [item if isinstance(item, str) else item.name or item.resolve().name for item in checked]
    sharing = Counter(last)
    wanted = {extension.lower() for extension in extensions}
    result, seen = LoadResult(), set[FileIdentity | str]()  # files and URLs: each read once
    for source, last_part in zip(checked, last, strict=True):
        # a URL shown as itself, a path by its last part, or as given when two share that part
        name = str(source) if sharing[last_part] > 1 else last_part
        files: Iterable[tuple[Path, str, os.stat_result | str]] = []
        if isinstance(source, str):
            if source not in seen:
                seen.add(source)
                fetch = functools.partial(load_url, source, timeout, max_bytes, deny_private, None)
                result.add(source, fetch, strict=strict)
        elif source.is_dir():
            root = source.resolve()
            walked = _walk(source, root, wanted, follow_symlinks, {root})
            files = ((path, str(Path(name, path.relative_to(source))), why) for path, why in walked)
        else:
            files = [(source, name, source.stat())]  # it exists (checked above)
        for path, shown, status in files:
            shown_name = display_name(shown)
            if isinstance(status, str):
                result.skip(UnreadableSourceError(shown_name, status), strict=strict)
                continue
            if (identity := (status.st_dev, status.st_ino)) in seen:
                continue  # a file named twice (alone and in its folder): read once, first name
            seen.add(identity)
            result.stamps[shown_name] = stamp = _file_stamp(status)
            if status.st_size <= max_file_size and unchanged and unchanged(shown_name, stamp):
                result.loaded.append(shown_name)
                result.unchanged.append(shown_name)
                continue
            options: dict[str, Any] = {"identity": identity, "source": shown}
            read = functools.partial(load_file, path, max_file_size=max_file_size, **options)
            result.add(shown_name, read, strict=strict)
        if on_source is not None:
            on_source(display_name(source))
    if not (result.documents or result.unchanged):
        named = redact_credentials(", ".join(map(display_name, sources))) or "no sources given"
        if result.skipped:
            skipped = describe_skipped(result.skipped)
            raise ValueError(f"nothing could be loaded from {named}: skipped {skipped}")
        accepted = f"folders (read for {', '.join(DIRECTORY_EXTENSIONS)} files), those files alone"
        raise ValueError(
            f"no documents found in {named}. Accepted: {accepted}, BEIR .jsonl corpora, other "
            "UTF-8 text files, and http(s) URLs"
        )
    return result


def _file_stamp(status: os.stat_result) -> FileStamp:
    """What :attr:`LoadResult.stamps` records of a file's ``stat``."""
    return (status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino)


def _walk(
    directory: Path, root: Path, wanted: set[str], follow_symlinks: bool, seen: set[Path]
) -> Iterator[tuple[Path, os.stat_result | str]]:
    """Each ``wanted`` file under ``directory`` (hidden ones skipped, links kept inside unless
    ``follow_symlinks``) with its ``stat`` or why it is skipped; only links and folders resolved."""
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as error:
        yield directory, f"folder cannot be read ({error.strerror})"
        return
    for entry in entries:
        path = Path(entry.path)
        if entry.name.startswith("."):
            continue
        try:
            status, linked = entry.stat(), entry.is_symlink()  # the stat of a link's target
            is_folder = stat.S_ISDIR(status.st_mode)
            target = path.resolve(strict=True) if linked or is_folder else path
        except (OSError, RuntimeError):  # a broken link or a link loop
            if path.suffix.lower() in wanted:
                yield path, "broken link"
            continue
        if not is_folder and path.suffix.lower() not in wanted:
            continue
        if linked and not follow_symlinks and not target.is_relative_to(root):
            yield path, "link to outside the folder"
        elif is_folder:
            if target not in seen:  # linked folders are walked once: no loops
                seen.add(target)
                yield from _walk(path, root, wanted, follow_symlinks, seen)
        elif stat.S_ISREG(status.st_mode):
            yield path, status
        else:
            yield path, "not a regular file"


__all__ = [
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MAX_FILE_SIZE",
    "DENY_PRIVATE_ENV",
    "FileStamp",
    "LoadResult",
    "Skipped",
    "SkippedSourceWarning",
    "UnreadableSourceError",
    "count_tokens",
    "describe_skipped",
    "load",
    "load_file",
    "load_pdf",
    "load_web",
    "load_with_report",
    "split_documents",
]
