"""Security guarantees (issue 13): verified bytes are the bytes loaded, pickles hold only data,
signed index settings, private signing keys, no credentials in stored files, logs or traces,
and clean, bounded generated queries."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import pickle
import signal
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import blake3
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from rag_fusion_chain.retrievers import signing
from rag_fusion_chain.retrievers.faiss_files import MANIFEST_FILE
from rag_fusion_chain.retrievers.signing import UntrustedIndexError, signature_of, signing_key
from rag_fusion_chain.retrievers.stores import build_faiss, load_faiss
from rag_fusion_chain.validation import MAX_QUESTION_CHARS

DOCUMENTS = [
    Document("Heat pumps move heat with a refrigerant.", id="heat", metadata={"page": 1}),
    Document("Solar panels turn sunlight into electricity.", id="solar"),
    Document("Wind turbines turn moving air into power.", id="wind"),
]
EMBEDDINGS = DeterministicFakeEmbedding(size=16)


class Payload:
    """A pickle whose loading creates ``marker``: proof that code in it ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def malicious_docstore(marker: Path) -> bytes:
    """A FAISS ``index.pkl`` look-alike whose loading would run code."""
    return pickle.dumps((Payload(marker), {0: "heat"}))


def stored_texts(store: Any) -> list[str]:
    return sorted(document.page_content for document in store.docstore._dict.values())


# ============================================================================================
# 13.1 FAISS: the verified bytes are the bytes loaded; the pickle holds only data
# ============================================================================================


def langchain_folder(directory: Path) -> Path:
    """A folder as LangChain's ``FAISS.save_local`` writes it (``index.faiss`` + ``index.pkl``)."""
    build_faiss(DOCUMENTS, EMBEDDINGS).save_local(str(directory))
    return directory


def test_a_docstore_swapped_right_after_the_check_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_faiss(DOCUMENTS, EMBEDDINGS, path=tmp_path)
    checked_blocks = signing.CheckedBlocks  # index.faiss is read once docstore.json passed
    swaps: list[str] = []
    docstore = tmp_path / "docstore.json"

    def swap_then_read_the_index(*args: Any) -> Any:
        docstore.write_text(docstore.read_text().replace("Solar panels", "Forged panels"))
        swaps.append(docstore.name)
        return checked_blocks(*args)

    monkeypatch.setattr(signing, "CheckedBlocks", swap_then_read_the_index)
    store = load_faiss(tmp_path, EMBEDDINGS)
    assert swaps == ["docstore.json"], "the swap did not happen between check and load"
    assert stored_texts(store) == sorted(document.page_content for document in DOCUMENTS)
    monkeypatch.undo()
    with pytest.raises(UntrustedIndexError, match="docstore.json does not match"):
        load_faiss(tmp_path, EMBEDDINGS)  # the swapped file, read now, fails the check


BLOCK = 16384
"""Bytes per digested block of ``index.faiss`` in these tests (the kit's: 4 MiB): above the
8 KiB a buffered file reads ahead, so that a block rewritten while FAISS reads is read as changed."""
CHUNKS = [Document(f"Chunk {number}.", id=str(number)) for number in range(1000)]
"""Enough chunks (16-dimensional vectors) for an ``index.faiss`` of several blocks."""


def count_what_faiss_reads(monkeypatch: pytest.MonkeyPatch, after_first: Any = None) -> list[int]:
    """The size of each piece the kit's read callback hands FAISS's C++ reader (``after_first``
    runs once, when the first piece is handed over)."""
    import faiss

    delivered: list[int] = []
    pending = [after_first] if after_first else []
    reader = faiss.PyCallbackIOReader

    def counting_reader(read: Any, *args: Any) -> Any:
        def counted(count: int) -> bytes:
            piece = read(count)
            delivered.append(len(piece))
            if pending:
                pending.pop()()
            return piece

        return reader(counted, *args)

    monkeypatch.setattr(faiss, "PyCallbackIOReader", counting_reader)
    return delivered


def flip_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as file:  # in place: the inode the kit has open
        file.seek(offset)
        byte = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([byte ^ 1]))


@pytest.mark.parametrize(
    ("damage", "first_bad_block"),
    [
        ("a block changed", 2),
        ("truncated", 0),  # a size other than the recorded one: refused before any read
        ("extended", 0),
        ("two blocks swapped", 1),
        ("a block rewritten in place while FAISS reads", 2),
        ("another index's file", 0),
    ],
)
def test_no_byte_of_a_changed_block_of_index_faiss_reaches_faiss_s_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str, first_bad_block: int
) -> None:
    # index.faiss was streamed into FAISS's C++ reader while it was hashed (a crafted file was
    # parsed before its digest was compared), then read whole into memory first (2x the memory)
    import faiss

    monkeypatch.setattr(signing, "BLOCK_BYTES", BLOCK)
    build_faiss(CHUNKS, EMBEDDINGS, path=tmp_path)
    path = tmp_path / "index.faiss"
    saved = path.read_bytes()
    blocks = json.loads((tmp_path / MANIFEST_FILE).read_text())["files"]["index.faiss"]
    starts = range(0, len(saved), BLOCK)  # the BLAKE3 of each block, FAISS's writes cut at them
    assert blocks["blocks"] == [
        "blake3:" + blake3.blake3(saved[at : at + BLOCK]).hexdigest() for at in starts
    ]
    assert blocks["bytes"] == len(saved) and blocks["block_bytes"] == BLOCK and len(starts) > 3
    other = tmp_path / "other"
    build_faiss([Document("Forged.", id="heat")], EMBEDDINGS, path=other)
    after_first = None
    if damage == "a block changed":
        flip_byte(path, 2 * BLOCK + 5)
    elif damage in ("truncated", "extended"):
        path.write_bytes(saved[:-1] if damage == "truncated" else saved + b"\0")
    elif damage == "two blocks swapped":
        path.write_bytes(
            saved[:BLOCK]
            + saved[2 * BLOCK : 3 * BLOCK]
            + saved[BLOCK : 2 * BLOCK]
            + saved[3 * BLOCK :]
        )
    elif damage == "another index's file":
        path.write_bytes((other / "index.faiss").read_bytes())
    else:
        after_first = lambda: flip_byte(path, 2 * BLOCK + 5)  # noqa: E731
    delivered = count_what_faiss_reads(monkeypatch, after_first)
    with pytest.raises(UntrustedIndexError, match="index.faiss does not match the digest"):
        load_faiss(tmp_path, EMBEDDINGS)
    assert sum(delivered) <= first_bad_block * BLOCK
    path.write_bytes(saved)
    delivered.clear()
    loaded = load_faiss(tmp_path, EMBEDDINGS)
    assert sum(delivered) == len(saved)  # every verified byte, each once
    assert faiss.serialize_index(loaded.index).tobytes() == saved  # the round trip


def test_a_written_file_gives_its_digest_and_a_file_written_in_blocks_their_record(
    tmp_path: Path,
) -> None:
    # write_new_file returned Any: a digest (str), or with block_bytes a record (dict)
    pieces = [b"abcdefg", b"hij"]
    digest = signing.write_new_file(tmp_path / "whole", pieces)
    assert isinstance(digest, str) and signing.has_digest(tmp_path / "whole", digest)
    assert digest == "blake3:" + blake3.blake3(b"abcdefghij").hexdigest()
    record = signing.write_new_blocks(tmp_path / "blocks", pieces, 4)
    assert record["bytes"] == 10 and record["block_bytes"] == 4
    assert record["blocks"] == [
        "blake3:" + blake3.blake3(block).hexdigest() for block in (b"abcd", b"efgh", b"ij")
    ]
    with (tmp_path / "blocks").open("rb") as file:
        reader = signing.CheckedBlocks(file, record, UntrustedIndexError("changed"))
        assert b"".join(iter(lambda: reader.read(3), b"")) == b"abcdefghij"


def test_index_faiss_replaced_while_faiss_reads_it_loads_the_signed_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(signing, "BLOCK_BYTES", BLOCK)
    build_faiss(CHUNKS, EMBEDDINGS, path=tmp_path)
    build_faiss([Document("Forged.", id="heat")], EMBEDDINGS, path=tmp_path / "other")
    replace = lambda: os.replace(tmp_path / "other" / "index.faiss", tmp_path / "index.faiss")  # noqa: E731
    delivered = count_what_faiss_reads(monkeypatch, replace)
    assert load_faiss(tmp_path, EMBEDDINGS).index.ntotal == len(CHUNKS)  # the open file's
    assert len(delivered) > 1 and not (tmp_path / "other" / "index.faiss").exists()
    with pytest.raises(UntrustedIndexError, match="index.faiss does not match"):
        load_faiss(tmp_path, EMBEDDINGS)  # the replacement, read now


def test_the_kit_writes_no_pickle_and_imports_langchain_folders_with_trust(
    tmp_path: Path,
) -> None:
    build_faiss(DOCUMENTS, EMBEDDINGS, path=tmp_path / "kit")
    assert sorted(path.name for path in (tmp_path / "kit").iterdir()) == [
        "docstore.json",
        "index.faiss",
        MANIFEST_FILE,
    ]
    with pytest.raises(UntrustedIndexError, match="no manifest.json"):
        load_faiss(langchain_folder(tmp_path / "langchain"), EMBEDDINGS)
    store = load_faiss(tmp_path / "langchain", EMBEDDINGS, trust=True)
    assert stored_texts(store) == sorted(document.page_content for document in DOCUMENTS)


def test_trust_skips_the_signature_but_never_runs_code(tmp_path: Path) -> None:
    langchain_folder(tmp_path)
    marker = tmp_path / "payload-ran"
    (tmp_path / "index.pkl").write_bytes(malicious_docstore(marker))
    with pytest.raises(UntrustedIndexError, match=r"names pathlib\.Path\.touch"):
        load_faiss(tmp_path, EMBEDDINGS, trust=True)
    assert not marker.exists()


def test_a_validly_signed_pickle_naming_code_is_still_refused(tmp_path: Path) -> None:
    """Defence in depth: even a (format 1) manifest signed with the user's key cannot vouch for
    code in the pickle that kit versions before format 2 wrote."""
    build_faiss(DOCUMENTS, EMBEDDINGS, path=tmp_path)
    marker = tmp_path / "payload-ran"
    payload = malicious_docstore(marker)
    (tmp_path / "index.pkl").write_bytes(payload)
    manifest = json.loads((tmp_path / MANIFEST_FILE).read_text())
    manifest["format_version"] = 1
    manifest["files"] = {
        "index.faiss": manifest["files"]["index.faiss"],
        "index.pkl": hashlib.sha256(payload).hexdigest(),
    }
    manifest["signature"] = signature_of(manifest, signing_key())
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(UntrustedIndexError, match="not loaded"):
        load_faiss(tmp_path, EMBEDDINGS)
    assert not marker.exists()


def test_plain_metadata_types_pass_the_allow_list(tmp_path: Path) -> None:
    metadata = {
        "when": datetime.datetime(2024, 5, 1, 12, tzinfo=datetime.timezone.utc),
        "day": datetime.date(2024, 5, 1),
        "uuid": uuid.UUID(int=7),
        "tags": {"a", "b"},
        "nested": {"list": [1, 2.5, None, True], "bytes": b"\x00"},
    }
    documents = [Document("Batteries store energy.", id="battery", metadata=metadata)]
    build_faiss(documents, EMBEDDINGS).save_local(str(tmp_path))
    loaded = load_faiss(tmp_path, EMBEDDINGS, trust=True).docstore.search("battery")
    assert isinstance(loaded, Document) and loaded.metadata == metadata


def test_json_metadata_round_trips_and_other_metadata_is_named(tmp_path: Path) -> None:
    metadata = {"source": "a.md", "page": 3, "score": 0.5, "tags": ["x", None, True], "é": {}}
    documents = [Document("Batteries store energy.", id="battery", metadata=metadata)]
    build_faiss(documents, EMBEDDINGS, path=tmp_path / "json")
    loaded = load_faiss(tmp_path / "json", EMBEDDINGS).docstore.search("battery")
    assert isinstance(loaded, Document) and loaded.metadata == metadata
    dated = [Document("Batteries.", id="b", metadata={"day": datetime.date(2024, 5, 1)})]
    with pytest.raises(ValueError, match="documents: metadata must be JSON data"):
        build_faiss(dated, EMBEDDINGS, path=tmp_path / "dated")


def test_a_docstore_of_another_shape_is_a_clear_error(tmp_path: Path) -> None:
    langchain_folder(tmp_path / "pickle")
    (tmp_path / "pickle" / "index.pkl").write_bytes(pickle.dumps(({"heat": "no docstore"}, {})))
    with pytest.raises(ValueError, match="not a LangChain FAISS docstore pickle"):
        load_faiss(tmp_path / "pickle", EMBEDDINGS, trust=True)
    build_faiss(DOCUMENTS, EMBEDDINGS, path=tmp_path / "json")
    (tmp_path / "json" / "docstore.json").write_text('{"ids": ["heat"], "texts": [1]}')
    with pytest.raises(ValueError, match="not 3 ids, texts and metadata dicts"):
        load_faiss(tmp_path / "json", EMBEDDINGS, trust=True)


# ============================================================================================
# 22.7 only regular files of bounded size are opened: a FIFO or /dev/zero fails at once
# ============================================================================================


@contextmanager
def hang_guard(seconds: int) -> Iterator[None]:
    """Fail the test (instead of hanging the run) if the body blocks for ``seconds``."""

    def interrupt(*_: Any) -> None:
        raise TimeoutError(f"blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("plant", ["fifo", "dev-zero"])
@pytest.mark.parametrize(
    ("layout", "name"),
    [
        ("kit", "docstore.json"),
        ("kit", "index.faiss"),
        ("kit", MANIFEST_FILE),
        ("langchain", "index.pkl"),
    ],
)
@pytest.mark.parametrize("trust", [False, True])
def test_a_planted_fifo_or_dev_zero_link_fails_at_once(
    tmp_path: Path, plant: str, layout: str, name: str, trust: bool
) -> None:
    if layout == "kit":
        build_faiss(DOCUMENTS, EMBEDDINGS, path=tmp_path)
    else:
        langchain_folder(tmp_path)
    (tmp_path / name).unlink(missing_ok=True)
    if plant == "fifo":
        os.mkfifo(tmp_path / name)
    else:
        (tmp_path / name).symlink_to("/dev/zero")
    started = time.monotonic()
    with hang_guard(5), pytest.raises(ValueError, match=f"{name} is not a regular file"):
        load_faiss(tmp_path, EMBEDDINGS, trust=trust or layout == "langchain")
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("plant", ["fifo", "dev-zero"])
@pytest.mark.parametrize(
    "name", ["params.index.json", "vocab.index.json", "data.csc.index.npy", "counts.csc.index.npy"]
)
def test_a_planted_fifo_or_dev_zero_link_in_bm25_fails_at_once(
    tmp_path: Path, plant: str, name: str
) -> None:
    # bm25s opens its files by name: a FIFO hung `rag-fusion retrieve` for ever, /dev/zero as
    # params.index.json was read until MemoryError
    from rag_fusion_chain.retrievers.bm25 import BM25Retriever

    BM25Retriever.from_documents(DOCUMENTS).save(tmp_path)
    (tmp_path / name).unlink()
    if plant == "fifo":
        os.mkfifo(tmp_path / name)
    else:
        (tmp_path / name).symlink_to("/dev/zero")
    with hang_guard(5), pytest.raises(ValueError, match=f"{name} is not a regular file"):
        BM25Retriever.load(tmp_path)


FORGED_BM25 = {  # each file of a saved BM25 index, and how a swap forges it
    "params.index.json": lambda text: text.replace('"k1": 1.5', '"k1": 9.5'),
    "vocab.index.json": lambda text: text.replace('"heat"', '"forged"'),
    "data.csc.index.npy": lambda array: array + 1,
    "counts.csc.index.npy": lambda array: array + 1,
}


@pytest.mark.parametrize("name", sorted(FORGED_BM25))
def test_a_bm25_file_swapped_right_after_its_check_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # the kit checked each file by name, then bm25s (and np.load) opened it again by name: a file
    # swapped in between was the one loaded
    import numpy as np

    from rag_fusion_chain.retrievers import bm25

    def state(retriever: bm25.BM25Retriever) -> Any:
        index = retriever.index
        return index.vocab_dict, index.k1, index.scores["data"].tolist(), retriever.counts.tolist()

    bm25.BM25Retriever.from_documents(DOCUMENTS).save(tmp_path)
    saved = state(bm25.BM25Retriever.load(tmp_path))
    target, forge, opened = tmp_path / name, FORGED_BM25[name], bm25.open_regular_file
    swaps: list[str] = []

    def open_then_swap(path: str | Path, *args: Any) -> Any:
        file = opened(path, *args)
        if Path(path) == target and not swaps:  # swapped for a new file, as an attacker would
            forged = tmp_path / "forged.npy"
            if name.endswith(".npy"):
                np.save(forged, forge(np.load(target)))
            else:
                forged.write_text(forge(target.read_text()))
            forged.replace(target)
            swaps.append(name)
        return file

    monkeypatch.setattr(bm25, "open_regular_file", open_then_swap)
    loaded = state(bm25.BM25Retriever.load(tmp_path))
    assert swaps == [name], "the swap did not happen"
    assert loaded == saved
    monkeypatch.undo()
    assert state(bm25.BM25Retriever.load(tmp_path)) != saved  # the forged file, read now


@pytest.mark.parametrize("name", ["index.json", "faiss/manifest.json", "bm25/retriever.json"])
def test_an_index_file_nested_too_deep_is_a_clear_error(tmp_path: Path, name: str) -> None:
    # json.loads raised RecursionError, which no caller expects from a corrupt file
    from rag_fusion_chain.retrievers.index_directory import build_index, open_index

    build_index(DOCUMENTS, tmp_path, embedding=EMBEDDINGS, chunk_size=None)
    folder = tmp_path if name == "index.json" else next((tmp_path / ".versions").iterdir())
    (folder / name).write_text("[" * 100_000)
    with pytest.raises(ValueError, match=f"{Path(name).name} is not valid JSON"):
        open_index(tmp_path, EMBEDDINGS)


BROKEN_BM25 = {  # a change to one saved array, and how it broke bm25s's numba scoring
    "indices.csc.index.npy": lambda array: array + 1_000_000_000,  # written out of bounds
    "indptr.csc.index.npy": lambda array: array * 1000,  # read out of bounds
    "nonoccurrence_array.index.npy": lambda array: array[:1],  # read out of bounds
}


@pytest.mark.parametrize("name", [*BROKEN_BM25, "vocab.index.json"])
def test_bm25_arrays_that_do_not_fit_their_documents_are_refused_at_load(
    tmp_path: Path, name: str
) -> None:
    # the BM25 files are unsigned; an out-of-range posting made backend="numba" write outside
    # its scores array (a segmentation fault here), backend="numpy" raise IndexError per search
    import numpy as np

    from rag_fusion_chain.retrievers.bm25 import BM25Retriever

    BM25Retriever.from_documents(DOCUMENTS, method="bm25l").save(tmp_path)
    if name in BROKEN_BM25:
        np.save(tmp_path / name, BROKEN_BM25[name](np.load(tmp_path / name)))
    else:
        (tmp_path / name).write_text(json.dumps({"heat": 10_000}))  # a term id past the matrix
    with pytest.raises(ValueError, match="corrupt or incomplete"):
        BM25Retriever.load(tmp_path)


def plant(path: Path, kind: str) -> None:
    """A FIFO (reading waits for ever for a writer) or a link to /dev/zero (endless) at ``path``."""
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_planted_index_json_fails_at_once_and_a_forced_build_replaces_it(
    tmp_path: Path, kind: str
) -> None:
    # open_index said "no index in"; build_index(force=True) read it for ever, --update too
    from typer.testing import CliRunner

    from rag_fusion_chain.cli import app
    from rag_fusion_chain.retrievers.index_directory import INDEX_FILE, build_index, open_index

    out = tmp_path / "index"
    build_index(DOCUMENTS, out, embedding=EMBEDDINGS, chunk_size=None)
    plant(out / INDEX_FILE, kind)
    refused = f"{INDEX_FILE} is not a regular file"
    with hang_guard(5):
        with pytest.raises(ValueError, match=refused):
            open_index(out, EMBEDDINGS)
        with pytest.raises(ValueError, match=refused):
            build_index(DOCUMENTS, out, embedding=EMBEDDINGS, update=True)
        result = CliRunner().invoke(app, ["retrieve", "heat", "--index", str(out)])
        assert result.exit_code == 1 and refused in result.stderr, result.output
        build_index(DOCUMENTS, out, embedding=EMBEDDINGS, chunk_size=None, force=True)
    assert (out / INDEX_FILE).is_file() and not (out / INDEX_FILE).is_symlink()
    assert open_index(out, EMBEDDINGS).settings["documents"] == len(DOCUMENTS)


def test_an_index_json_above_its_bound_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag_fusion_chain.retrievers import index_directory

    index_directory.build_index(DOCUMENTS, tmp_path, embedding=EMBEDDINGS, chunk_size=None)
    size = (tmp_path / index_directory.INDEX_FILE).stat().st_size
    monkeypatch.setattr(index_directory, "MAX_SETTINGS_BYTES", size - 1)
    with pytest.raises(ValueError, match=f"is {size} bytes, above the bound of {size - 1}"):
        index_directory.open_index(tmp_path, EMBEDDINGS)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_planted_embedding_cache_shard_fails_at_once(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("numpy")
    from rag_fusion_chain.evaluate.cache import CachedEmbeddings

    cached = CachedEmbeddings(EMBEDDINGS, tmp_path)
    cached.embed_query("heat")
    assert len(list(cached.directory.glob("*.npz"))) == 1
    plant(cached.directory / "planted.npz", kind)
    fresh = CachedEmbeddings(EMBEDDINGS, tmp_path)
    with hang_guard(5), pytest.raises(ValueError, match="planted.npz is not a regular file"):
        fresh.embed_query("heat")


def test_a_compressed_embedding_cache_shard_is_not_inflated(tmp_path: Path) -> None:
    # the kit writes its shards uncompressed; a deflated one (a zip bomb: 20 KB on disk, 40 MB
    # read into memory here, any size in general) was inflated whole
    np = pytest.importorskip("numpy")
    from rag_fusion_chain.evaluate.cache import CachedEmbeddings

    cached = CachedEmbeddings(EMBEDDINGS, tmp_path)
    cached.embed_query("heat")
    bomb = cached.directory / "bomb.npz"
    np.savez_compressed(bomb, keys=np.asarray(["k"]), vectors=np.zeros((1, 10_000_000), "f4"))
    assert bomb.stat().st_size < 100_000
    with pytest.raises(ValueError, match="bomb.npz is compressed"):
        CachedEmbeddings(EMBEDDINGS, tmp_path).embed_query("heat")


def test_an_index_file_above_the_bound_is_not_read(tmp_path: Path) -> None:
    build_faiss(DOCUMENTS, EMBEDDINGS, path=tmp_path)
    size = (tmp_path / "docstore.json").stat().st_size
    with pytest.raises(ValueError, match=f"is {size} bytes, above the bound of {size - 1}"):
        signing.read_whole(tmp_path / "docstore.json", max_bytes=size - 1)


# ============================================================================================
# 13.6 index.json is signed; a key file others can read is reported
# ============================================================================================


def test_index_json_is_signed_and_an_edited_one_is_refused(tmp_path: Path) -> None:
    from rag_fusion_chain.retrievers.index_directory import INDEX_FILE, build_index, open_index

    out = tmp_path / "index"
    settings = build_index(DOCUMENTS, out, embedding=EMBEDDINGS, chunk_size=None)
    assert settings["signature"].startswith("hmac-sha256:")
    assert open_index(out, EMBEDDINGS).settings == settings
    edited = {**settings, "embedding": "sentence-transformers:/tmp/someone-elses-model"}
    (out / INDEX_FILE).write_text(json.dumps(edited))
    with pytest.raises(UntrustedIndexError, match="index.json does not verify"):
        open_index(out, EMBEDDINGS)
    unsigned = {name: value for name, value in settings.items() if name != "signature"}
    (out / INDEX_FILE).write_text(json.dumps(unsigned))
    with pytest.raises(UntrustedIndexError, match="index.json is not signed"):
        open_index(out, EMBEDDINGS)
    assert open_index(out, EMBEDDINGS, trust=True).settings == unsigned


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_a_fifo_as_the_signing_key_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "key"
    os.mkfifo(key_file)
    monkeypatch.setenv(signing.SIGNING_KEY_ENV, str(key_file))
    with hang_guard(5), pytest.raises(ValueError, match="key is not a regular file"):
        signing_key()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_signing_key_others_can_read_is_reported_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int
) -> None:
    key_file = tmp_path / f"key-{mode:o}"
    monkeypatch.setenv(signing.SIGNING_KEY_ENV, str(key_file))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fresh key (0600) is silent
        build_faiss(DOCUMENTS, EMBEDDINGS, path=tmp_path / "index")
        load_faiss(tmp_path / "index", EMBEDDINGS)
    key_file.chmod(mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_faiss(tmp_path / "index", EMBEDDINGS)
        load_faiss(tmp_path / "index", EMBEDDINGS)
    reports = [str(warning.message) for warning in caught if "signing key" in str(warning.message)]
    assert len(reports) == 1, reports
    assert str(key_file) in reports[0] and f"chmod 600 {key_file}" in reports[0]


# ============================================================================================
# 13.4 generated queries: no control characters, no query longer than a question
# ============================================================================================

HIDDEN = (
    "1. \x1b[1;31msolar\x1b[0m power\x00\n"  # ANSI colour and NUL
    "2. \u202ednaw\u202c turbines\n"  # right-to-left override
    "3. hea\u200bt pu\u2060mps\ufeff\n"  # zero-width space, word joiner, BOM
    "4. \x1b]8;;http://evil.example\x07battery\x1b]8;;\x07 storage\tcost\n"  # OSC hyperlink
)
CLEAN = ["solar power", "dnaw turbines", "heat pumps", "battery storage cost"]


def test_control_and_format_characters_are_stripped_from_generated_queries() -> None:
    from langchain_core.language_models import FakeListChatModel

    from rag_fusion_chain import queries

    reply = "\x1b[1mHere are four queries:\x1b[0m\n" + HIDDEN  # a preamble in colour is one too
    generate = queries.rag_fusion(FakeListChatModel(responses=[reply] * 2), n=4)
    assert generate.invoke("energy") == CLEAN
    assert [query for chunk in generate.stream("energy") for query in chunk] == CLEAN
    listed = queries.QueryListParser(n=4).parse(
        json.dumps([line[3:] for line in HIDDEN.split("\n")])
    )
    assert listed == CLEAN  # a JSON list is cleaned the same way


def test_a_chain_searches_only_clean_queries() -> None:
    from langchain_core.language_models import FakeListChatModel
    from langchain_core.retrievers import BaseRetriever

    from rag_fusion_chain import chains

    searched: list[str] = []

    class Recording(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            searched.append(query)
            return [DOCUMENTS[0]]

    llm = FakeListChatModel(responses=[HIDDEN, "Heat pumps move heat [1]."])
    chains.rag_fusion_chain([Recording()], llm, n=4).invoke("energy")
    # the ready chains search the question too
    assert sorted(searched) == sorted([*CLEAN, "energy"])


def test_a_generated_line_longer_than_a_question_is_cut_with_a_warning() -> None:
    from langchain_core.runnables import RunnableGenerator

    from rag_fusion_chain import queries

    # 72,000 characters on one line: over a query's bound, within the whole output's
    # (QueryListParser.max_output_chars; what lies past that is tested in test_query_parsing.py)
    huge = "photovoltaic efficiency " * 3_000
    reply = f"1. solar power\n2. {huge}\n3. wind power"

    def model(prompts: Iterator[Any]) -> Iterator[str]:
        """Streams the reply in 1,000-character chunks (a stub chat model)."""
        for _ in prompts:
            yield from (reply[start : start + 1000] for start in range(0, len(reply), 1000))

    generate = queries.rag_fusion(RunnableGenerator(model), n=3)
    for run in (generate.invoke, lambda question: sum(generate.stream(question), [])):
        with pytest.warns(UserWarning, match=r"query of 71999 characters was cut .* 20000"):
            generated = run("energy")
        assert generated[0] == "solar power" and generated[2] == "wind power"
        assert len(generated[1]) <= MAX_QUESTION_CHARS
        assert huge.startswith(generated[1])


def test_a_hyde_passage_is_cleaned_keeps_its_lines_and_is_bounded() -> None:
    from langchain_core.language_models import FakeListChatModel

    from rag_fusion_chain import queries

    passage = "Heat\u200b pumps \x1b[32mmove\x1b[0m heat.\nThey work\u202e in winter.\x00"
    hyde = queries.hyde(FakeListChatModel(responses=[passage, "x" * 30_000]))
    assert hyde.invoke("How do heat pumps work?") == "Heat pumps move heat.\nThey work in winter."
    with pytest.warns(UserWarning, match="cut"):
        assert len(hyde.invoke("How do heat pumps work?")) == MAX_QUESTION_CHARS


# ============================================================================================
# 13.5 no credentials in index files, logs or traces
# ============================================================================================

CANARY = "canary-5e1f0c7d93"


def every_file_byte(directory: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file())


def test_credentials_in_the_base_url_and_key_reach_no_file_log_or_trace(
    tmp_path: Path,
    clean_model_env: pytest.MonkeyPatch,
    clean_openai_stub: Any,
    langsmith_recorder: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A canary in the base URL's password and in the API key: used, and never written down."""
    import base64
    import logging

    from langchain_core.tracers.langchain import LangChainTracer
    from langsmith import Client

    from rag_fusion_chain import chains, models
    from rag_fusion_chain.retrievers.index_directory import build_index, open_index

    caplog.set_level(logging.DEBUG)
    base_url = clean_openai_stub.base_url.replace("http://", f"http://reader:{CANARY}-pw@")
    clean_model_env.setenv("OPENAI_BASE_URL", base_url)
    clean_model_env.setenv("OPENAI_API_KEY", f"sk-{CANARY}-key")
    clean_model_env.setenv("RAG_FUSION_CHAT_MODEL", "stub-chat")
    clean_openai_stub.script(["heat pump efficiency\nwinter heating", "They move heat [1]."])
    source = tmp_path / "heat.txt"
    source.write_text("Heat pumps move heat from outside air into the house, even in winter.")
    client = Client(api_url=langsmith_recorder.url, api_key="lsv2-recorder")
    tracer = LangChainTracer(client=client, project_name="security")

    for store in ("faiss", "chroma"):
        out = tmp_path / store
        build_index([source], out, store=store, embedding="openai:stub-embed")
        opened = open_index(out)
        identity = f"openai:stub-embed@{clean_openai_stub.base_url}"  # credentials taken out
        assert opened.settings["embedding_identity"] == identity
        assert CANARY.encode() not in every_file_byte(out), f"the canary is in the {store} index"
    chain = chains.rag_fusion_chain(opened.retrievers(hybrid=True, k=2), models.chat_model(), n=2)
    assert chain.invoke("How do heat pumps work?", config={"callbacks": [tracer]})
    tracer.wait_for_futures()
    client.flush()

    used = {request.headers.get("authorization") for request in clean_openai_stub.requests}
    expected = base64.b64encode(f"reader:{CANARY}-pw".encode()).decode()
    assert used == {f"Basic {expected}"}, "the URL credentials were not sent"
    assert [run for run in langsmith_recorder.runs.values() if run["run_type"] == "llm"]
    traced = (
        langsmith_recorder.payload()
        + repr([request.headers for request in langsmith_recorder.requests]).encode()
    )
    assert CANARY.encode() not in traced
    assert any(record.levelno == logging.DEBUG for record in caplog.records)
    for record in caplog.records:
        shown = f"{record.getMessage()} {record.args!r} {record.exc_text or ''}"
        assert CANARY not in shown, f"{record.name}: {shown[:300]}"


def test_url_credentials_are_redacted_in_sources_ids_and_identities() -> None:
    from rag_fusion_chain import models
    from rag_fusion_chain.retrievers.index_directory import _without_url_credentials

    assert models.redact_credentials("http://u:p@ss@host:8/v1?x=1") == "http://***@host:8/v1?x=1"
    assert models.redact_credentials("see https://host/a@b") == "see https://host/a@b"
    page = Document(
        "text", id="https://u:secret@site/page#0", metadata={"source": "https://u:secret@site/page"}
    )
    clean = _without_url_credentials(page)
    assert (clean.id, clean.metadata["source"]) == (
        "https://***@site/page#0",
        "https://***@site/page",
    )
    assert page.id == "https://u:secret@site/page#0"  # the input is not mutated
    with pytest.raises(ValueError, match="base_url: credentials in the URL"):
        models.chat_model("m", base_url="http://u:p@127.0.0.1/v1", http_client=object())
    with pytest.raises(ValueError, match="no chat model name") as unnamed:  # serve shows it
        models.chat_model(base_url="http://u:secret@127.0.0.1/v1")
    assert "secret" not in str(unnamed.value) and "127.0.0.1/v1" in str(unnamed.value)
