"""Signing what the kit saves (an HMAC-SHA256 of a record's canonical JSON under a per-user key,
README: Security), so that it loads back only what this user's kit wrote; bounded file reads."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import io
import json
import os
import secrets
import stat
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import blake3

SIGNING_KEY_ENV = "RAG_FUSION_INDEX_KEY_FILE"
SIGNATURE_FIELD = "signature"
SIGNATURE_PREFIX = "hmac-sha256:"
BLAKE3_PREFIX = "blake3:"  # marks BLAKE3 digests (3.5x SHA-256's speed); bare hex (older): SHA-256
TRUST_ADVICE = (
    "Rebuild the index on this machine, or pass trust=True (rag-fusion: --trust-index) if you "
    "trust its origin."
)
STORE_HINT = "an index directory of `rag-fusion index` or build_index opens with open_index()"
"""Said when a store's loader is given a folder without that store (an index directory, say)."""


class UntrustedIndexError(ValueError):
    """A saved index cannot be verified (unsigned, signed with another key, or changed)."""


MAX_INDEX_FILE_BYTES = 64 << 30  # the largest index file opened (about 40M 384-dimensional vectors)
BLOCK_BYTES = 4 << 20  # index.faiss digested per block: one in memory at a load (16 MiB: slower)
FileContent = Sequence[bytes] | Callable[[Callable[[bytes], int]], object]  # pieces, or a writer


def open_regular_file(path: str | Path, max_bytes: int = MAX_INDEX_FILE_BYTES) -> io.BufferedReader:
    """``path`` opened for reading if it is a regular file of at most ``max_bytes``: checked
    with ``fstat`` once open (non-blocking), so a FIFO or ``/dev/zero`` fails at once."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(f"index file missing: {path}") from None
    status = os.fstat(descriptor)
    if stat.S_ISREG(status.st_mode) and status.st_size <= max_bytes:
        os.set_blocking(descriptor, True)
        return io.open(descriptor, "rb")  # noqa: UP020 - typed as a BufferedReader
    os.close(descriptor)
    if stat.S_ISDIR(status.st_mode):
        raise FileNotFoundError(f"index file missing: {path} is a directory")
    problem = f"is {status.st_size} bytes, above the bound of {max_bytes}"
    if not stat.S_ISREG(status.st_mode):
        problem = f"is not a regular file ({stat.filemode(status.st_mode)[0]!r} in ls -l terms)"
    raise ValueError(f"{path} {problem}, so it is not read")


def new_hash(recorded: object = BLAKE3_PREFIX, data: bytes = b"") -> Any:
    """The hash a ``recorded`` digest names: BLAKE3 for ``blake3:`` or none, else SHA-256."""
    if str(recorded or BLAKE3_PREFIX).startswith(BLAKE3_PREFIX):
        return blake3.blake3(data)
    return hashlib.sha256(data)


def recorded_digest(hashed: Any, rest: io.BufferedReader | None = None) -> str:
    """The digest as recorded (``blake3:`` and hex, or SHA-256's hex), the ``rest`` of a file in."""
    for block in iter(lambda: rest.read(1 << 20), b"") if rest else ():
        hashed.update(block)
    return (BLAKE3_PREFIX if hashed.name == "blake3" else "") + hashed.hexdigest()


class CheckedBlocks:
    """``read`` for FAISS's reader: ``file`` a block at a time, each handed on only once its digest
    is the ``recorded`` one (:func:`write_new_blocks`'s; older manifests: the whole file's)."""

    def __init__(self, file: io.BufferedReader, recorded: Any, refusal: Exception) -> None:
        size = os.fstat(file.fileno()).st_size
        if isinstance(recorded, str):  # the whole file one block
            recorded = {"bytes": size, "block_bytes": size, "blocks": [recorded]}
        if recorded["bytes"] != size:
            raise refusal  # truncated or extended
        self.file, self.block_bytes, self.refusal = file, recorded["block_bytes"], refusal
        self.digests, self.block = iter(recorded["blocks"]), io.BytesIO()

    def read(self, count: int) -> bytes:
        if piece := self.block.read(count):  # the whole block itself if count covers it
            return piece
        block, expected = self.file.read(self.block_bytes), next(self.digests, None)
        if (block or expected) and recorded_digest(new_hash(expected, block)) != expected:
            raise self.refusal  # a changed block, or bytes past the last one (expected None)
        self.block = io.BytesIO(block)
        return self.block.read(count)


def read_whole(path: str | Path, max_bytes: int = MAX_INDEX_FILE_BYTES) -> bytes:
    """A regular file's bytes (as many as it held when opened), read once: hash and parse these."""
    with open_regular_file(path, max_bytes) as file:
        return file.read(os.fstat(file.fileno()).st_size)


def has_digest(path: str | Path, recorded: str) -> bool:
    """Whether the regular file at ``path`` holds the bytes the ``recorded`` digest was made of."""
    with open_regular_file(path) as file:  # read in blocks
        return recorded_digest(new_hash(recorded), file) == recorded


def write_new_file(path: Path, content: FileContent) -> str:
    """Write ``content`` (pieces, or what it emits) to a new file renamed ``path``; its digest."""
    return str(write_new_blocks(path, content)["blocks"][0])


def write_new_blocks(path: Path, content: FileContent, block_bytes: int = 0) -> dict[str, Any]:
    """:func:`write_new_file`, recording the size and the digest of each ``block_bytes`` block in
    order (0: the whole file one block), as :class:`CheckedBlocks` checks them on reading."""
    hashes, size = [new_hash()], 0
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as handle:

            def write(data: bytes) -> int:
                nonlocal size
                view = memoryview(data)
                while view:  # the piece up to the next block boundary, if any
                    if block_bytes and size and size % block_bytes == 0:
                        hashes.append(new_hash())
                    piece = view[: block_bytes - size % block_bytes] if block_bytes else view
                    hashes[-1].update(piece)
                    size, view = size + len(piece), view[len(piece) :]
                return handle.write(data)

            if callable(content):
                content(write)
            else:
                for piece in content:
                    write(piece)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)
    return {"bytes": size, "block_bytes": block_bytes, "blocks": list(map(recorded_digest, hashes))}


def signing_key_file() -> Path:
    """``$RAG_FUSION_INDEX_KEY_FILE``, else ``rag-fusion-chain/index-signing.key`` under
    ``$XDG_CONFIG_HOME`` or ``~/.config``."""
    if configured := os.environ.get(SIGNING_KEY_ENV):
        return Path(configured).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "rag-fusion-chain" / "index-signing.key"


def signing_key() -> bytes:
    """This user's secret signing key, made on first use."""
    path = signing_key_file()
    if not path.exists():
        _create_signing_key(path)
    return _read_signing_key(path)


def _read_signing_key(path: Path) -> bytes:
    with open_regular_file(path, 1024) as handle:  # mode and bytes of one file, not a FIFO
        mode = os.fstat(handle.fileno()).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            _warn_others_can_read(path, mode)
        raw = handle.read(1024)
    key = b""
    with contextlib.suppress(ValueError):  # UnicodeDecodeError is one
        key = bytes.fromhex(raw.decode("ascii").strip())
    if len(key) < 32:
        raise ValueError(
            f"{path} is not an index signing key (64 hex digits); remove it to have a new one "
            "made (indexes signed with the old key then need rebuilding or trust=True)"
        )
    return key


@functools.cache  # once per key file and mode, per process
def _warn_others_can_read(path: Path, mode: int) -> None:
    warnings.warn(
        f"the index signing key {path} is accessible to group or others (mode "
        f"{stat.filemode(mode)}): anyone who can read it can sign an index that this kit will "
        f"load and unpickle. Restrict it: chmod 600 {path}",
        stacklevel=4,
    )


def _create_signing_key(path: Path) -> None:
    """Write a random key to ``path`` (mode 0600) in one step, unless a key appears meanwhile."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(secrets.token_hex(32) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another process made one first: use it
            os.link(temporary, path)  # complete when it appears; never replaces a key
    finally:
        temporary.unlink(missing_ok=True)


def signature_of(record: Mapping[str, Any], key: bytes) -> str:
    """HMAC-SHA256 of the record's canonical JSON, without its signature field."""
    unsigned = {name: value for name, value in record.items() if name != SIGNATURE_FIELD}
    message = json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return SIGNATURE_PREFIX + hmac.new(key, message, hashlib.sha256).hexdigest()


def sign(record: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``record`` with its signature under this user's key (made on first use)."""
    return {**record, SIGNATURE_FIELD: signature_of(record, signing_key())}


def verify_signature(record: Mapping[str, Any], where: str | Path) -> None:
    """Raise :class:`UntrustedIndexError` unless ``record`` (read from ``where``) is signed
    with this user's key."""
    recorded = record.get(SIGNATURE_FIELD)
    if not isinstance(recorded, str):
        raise UntrustedIndexError(
            f"{where} is not signed (saved by an older version of the kit, or edited), "
            f"so nothing shows that this kit wrote the index. {TRUST_ADVICE}"
        )
    if not signing_key_file().exists():
        raise UntrustedIndexError(
            f"{where} is signed, but this user has no index signing key ({signing_key_file()}): "
            f"the index was made by another user or machine. {TRUST_ADVICE}"
        )
    expected = signature_of(record, _read_signing_key(signing_key_file()))
    if not hmac.compare_digest(recorded.encode("utf-8"), expected.encode("utf-8")):
        raise UntrustedIndexError(
            f"the signature of {where} does not verify with this user's index signing "
            f"key ({signing_key_file()}): the index was made by another user or machine, or it "
            f"was rewritten. {TRUST_ADVICE}"
        )
