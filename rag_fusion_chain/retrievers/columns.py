"""Saved documents as JSON columns (ids, texts, metadatas), for FAISS and BM25: no pickle, and no
object per chunk at load (a search makes Documents for its hits only)."""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import json
from collections.abc import Iterable, Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import orjson
from langchain_core.documents import Document

COLUMNS = ("ids", "texts", "metadatas")
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


class StoredDocuments(Sequence[Document]):
    """Documents by position over loaded columns, each made when it is read. ``file``: the
    columns file they were parsed from or saved as, the digest of its bytes then, and the inode
    and mtime it was written with (none if read)."""

    def __init__(self, ids: list[str], texts: list[str], metadatas: list[dict[str, Any]]) -> None:
        self.ids, self.texts, self.metadatas = ids, texts, metadatas
        self.file: tuple[Any, ...] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, position: int) -> Document:  # type: ignore[override]
        return Document(
            self.texts[position], metadata=self.metadatas[position], id=self.ids[position]
        )


class DocumentsById(MutableMapping[str, Document]):
    """``{id: Document}`` over :class:`StoredDocuments` (a FAISS docstore's ``_dict``); writes and
    deletions behave as on a dict. The ``{id: position}`` map is made on first use (the first
    search), not at load."""

    def __init__(self, stored: StoredDocuments) -> None:
        self._stored = stored
        self._written: dict[str, Document] = {}

    @functools.cached_property
    def _positions(self) -> dict[str, int]:
        return dict(zip(self._stored.ids, range(len(self._stored)), strict=True))

    def __getitem__(self, identifier: str) -> Document:
        written = self._written.get(identifier)
        return written if written is not None else self._stored[self._positions[identifier]]

    def __setitem__(self, identifier: str, document: Document) -> None:
        self._written[identifier] = document
        self._positions.setdefault(identifier, -1)

    def __contains__(self, identifier: object) -> bool:  # no KeyError raised and caught per id
        return identifier in self._positions

    def update(self, other: Any = (), /, **more: Any) -> None:  # a FAISS add: one call per map
        added = dict(other, **more)
        self._written.update(added)
        positions = self._positions
        positions.update(dict.fromkeys([key for key in added if key not in positions], -1))

    def __delitem__(self, identifier: str) -> None:
        del self._positions[identifier]
        self._written.pop(identifier, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._positions)

    def __len__(self) -> int:
        return len(self._positions)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (``FAISS.save_local``) as a plain dict, which any loader can read back."""
        return dict, (dict(self.items()),)

    def unchanged(self) -> StoredDocuments | None:
        """The stored documents, unless a write or a deletion changed the mapping."""
        deleted = "_positions" in vars(self) and len(self) != len(self._stored)  # not made: none
        return None if self._written or deleted else self._stored


def document_columns(documents: Iterable[Document]) -> tuple[list[Any], list[Any], list[Any]]:
    """The ids, texts and metadatas of ``documents`` (loaded columns as they are)."""
    if isinstance(documents, StoredDocuments):
        return documents.ids, documents.texts, documents.metadatas
    listed = list(documents)
    return [d.id for d in listed], [d.page_content for d in listed], [d.metadata for d in listed]


def columns_json(documents: Iterable[Document], where: Path) -> tuple[bytes, ...]:
    """``documents`` as ``{"ids", "texts", "metadatas"}`` UTF-8 JSON in pieces (not joined: no
    copy); ValueError naming ``where`` when a metadata value is not JSON data."""
    ids, texts, metadatas = document_columns(documents)
    try:  # one id or text a line, for read_columns
        lines = [orjson.dumps(column, option=orjson.OPT_INDENT_2) for column in (ids, texts)]
        pieces = *lines, _metadata_json(metadatas)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"documents: metadata must be JSON data (str, numbers, bools, None, lists, dicts) to "
            f"be saved in {where}: {error}; convert other values (dates, bytes, sets) first"
        ) from error
    return b'{"ids":', pieces[0], b',"texts":', pieces[1], b',"metadatas":', pieces[2], b"}"


def _metadata_json(metadatas: list[Any]) -> bytes:
    """orjson (ten times faster) for dicts of str, int, float, bool and None (NaN, which it writes
    as null, aside); else ``json``, whose output and refusals the saved files have always had."""
    kinds = set(map(type, itertools.chain.from_iterable(map(dict.values, metadatas))))
    if kinds <= _JSON_SCALARS:
        with contextlib.suppress(TypeError):  # keys that are not str, ints beyond 64 bits
            encoded = orjson.dumps(metadatas)
            if float not in kinds or b"null" not in encoded:
                return encoded
    return json.dumps(metadatas, ensure_ascii=False, separators=(",", ":")).encode()


def parse_columns(data: bytes) -> Any:
    """``json.loads`` of :func:`columns_json` output with the cyclic GC paused: the collections
    that a load's many new metadata dicts trigger would otherwise take a fifth of the parse."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return json.loads(data)
    finally:
        if paused:
            gc.enable()


def read_columns(file: BinaryIO) -> Any:
    """:func:`columns_json` output read line by line (an id or a text a line): no copy of the
    whole file in memory. Other layouts, and lines orjson refuses, are parsed whole by ``json``."""
    if file.readline() == b'{"ids":[\n':
        with contextlib.suppress(ValueError):  # orjson's and json's errors, UnicodeDecodeError
            ids, line = _values_to_bracket(file)
            texts, end = _values_to_bracket(file) if line == b'],"texts":[\n' else ([], b"")
            if end.startswith(b'],"metadatas":') and end.endswith(b"}"):
                metadatas = parse_columns(end[len(b'],"metadatas":') : -1])
                return {"ids": ids, "texts": texts, "metadatas": metadatas}
    file.seek(0)
    return parse_columns(file.read())


def _values_to_bracket(file: BinaryIO) -> tuple[list[Any], bytes]:
    """The JSON values of ``file``'s lines up to the line that starts with ``]``, and that line;
    ValueError unless a comma ends each value's line but the last, as in an array."""
    values: list[Any] = []
    commas, comma = 0, True
    for line in file:
        if line.startswith(b"]") and not comma and commas == len(values) - 1:
            return values, line
        comma = line.endswith(b",\n")
        commas += comma
        values.append(orjson.loads(line.removesuffix(b",\n")))
    raise ValueError("not a JSON value a line")


def stored_documents(columns: Any, where: Path, total: int) -> StoredDocuments:
    """:class:`StoredDocuments` from parsed :func:`columns_json` output; ValueError unless it
    holds ``total`` string ids, string texts and dict metadatas."""
    found = [columns.get(name) for name in COLUMNS] if isinstance(columns, dict) else [None] * 3
    if not all(
        isinstance(column, list) and len(column) == total and set(map(type, column)) <= {kind}
        for column, kind in zip(found, (str, str, dict), strict=True)
    ):
        raise ValueError(f"{where} is not {total} ids, texts and metadata dicts (inconsistent)")
    return StoredDocuments(*found)
