"""Security guarantees (issue 13): verified bytes are the bytes loaded, pickles hold only data,
signed index settings, private signing keys, no credentials in stored files, logs or traces,
and clean, bounded generated queries."""

from __future__ import annotations

import datetime
import json
import pickle
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from rag_fusion_chain.retrievers import stores
from rag_fusion_chain.retrievers.signing import signature_of, signing_key
from rag_fusion_chain.retrievers.stores import (
    MANIFEST_FILE,
    UntrustedIndexError,
    build_faiss,
    load_faiss,
)

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


def test_a_pickle_swapped_right_after_the_check_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_faiss(DOCUMENTS, EMBEDDINGS, path=tmp_path)
    marker = tmp_path / "payload-ran"
    verify_files = stores._verify_files
    swaps: list[str] = []

    def verify_then_swap(*args: Any) -> None:
        verify_files(*args)  # passes: the files on disk are the ones the manifest signs
        (tmp_path / "index.pkl").write_bytes(malicious_docstore(marker))  # the race's winner
        swaps.append("index.pkl")

    monkeypatch.setattr(stores, "_verify_files", verify_then_swap)
    store = load_faiss(tmp_path, EMBEDDINGS)
    assert swaps == ["index.pkl"], "the swap did not happen between check and load"
    assert not marker.exists()
    assert stored_texts(store) == sorted(document.page_content for document in DOCUMENTS)
    monkeypatch.undo()
    with pytest.raises(UntrustedIndexError, match="index.pkl does not match"):
        load_faiss(tmp_path, EMBEDDINGS)  # the swapped file, read now, fails the check
    assert not marker.exists()


def test_trust_skips_the_signature_but_never_runs_code(tmp_path: Path) -> None:
    build_faiss(DOCUMENTS, EMBEDDINGS, path=tmp_path)
    marker = tmp_path / "payload-ran"
    (tmp_path / "index.pkl").write_bytes(malicious_docstore(marker))
    with pytest.raises(UntrustedIndexError, match=r"names pathlib\.Path\.touch"):
        load_faiss(tmp_path, EMBEDDINGS, trust=True)
    (tmp_path / MANIFEST_FILE).unlink()
    with pytest.raises(UntrustedIndexError, match="which a FAISS docstore does not hold"):
        load_faiss(tmp_path, EMBEDDINGS, trust=True)
    assert not marker.exists()


def test_a_validly_signed_pickle_naming_code_is_still_refused(tmp_path: Path) -> None:
    """Defence in depth: even a manifest signed with the user's key cannot vouch for code."""
    build_faiss(DOCUMENTS, EMBEDDINGS, path=tmp_path)
    marker = tmp_path / "payload-ran"
    payload = malicious_docstore(marker)
    (tmp_path / "index.pkl").write_bytes(payload)
    manifest = json.loads((tmp_path / MANIFEST_FILE).read_text())
    manifest["files"]["index.pkl"] = stores.hashlib.sha256(payload).hexdigest()
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
    build_faiss(documents, EMBEDDINGS, path=tmp_path)
    loaded = load_faiss(tmp_path, EMBEDDINGS).docstore.search("battery")
    assert isinstance(loaded, Document) and loaded.metadata == metadata


def test_saved_files_stay_readable_by_langchain(tmp_path: Path) -> None:
    from langchain_community.vectorstores import FAISS

    build_faiss(DOCUMENTS, EMBEDDINGS, path=tmp_path)
    store = FAISS.load_local(str(tmp_path), EMBEDDINGS, allow_dangerous_deserialization=True)
    assert stored_texts(store) == sorted(document.page_content for document in DOCUMENTS)
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "index.faiss",
        "index.pkl",
        MANIFEST_FILE,
    ]


def test_a_docstore_of_another_shape_is_a_clear_error(tmp_path: Path) -> None:
    build_faiss(DOCUMENTS, EMBEDDINGS, path=tmp_path)
    (tmp_path / "index.pkl").write_bytes(pickle.dumps(({"heat": "not a docstore"}, {})))
    with pytest.raises(ValueError, match="not a LangChain FAISS docstore pickle"):
        load_faiss(tmp_path, EMBEDDINGS, trust=True)


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


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_signing_key_others_can_read_is_reported_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int
) -> None:
    key_file = tmp_path / f"key-{mode:o}"
    monkeypatch.setenv(stores.SIGNING_KEY_ENV, str(key_file))
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
