"""Vector stores on real FAISS and real Chroma (embedded and a real ``chroma run`` server)."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import subprocess
import sys
import uuid
import warnings
from pathlib import Path
from typing import Any

import blake3
import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from rag_fusion_chain.fusion import document_id
from rag_fusion_chain.models import embedding_identity
from rag_fusion_chain.retrievers.faiss_files import MANIFEST_FILE
from rag_fusion_chain.retrievers.signing import (
    SIGNING_KEY_ENV,
    UntrustedIndexError,
    sign,
    signature_of,
    signing_key,
    signing_key_file,
)
from rag_fusion_chain.retrievers.stores import (
    CHROMA_TIMEOUT_SECONDS,
    VectorRetriever,
    build_chroma,
    build_faiss,
    empty_faiss_index,
    load_chroma,
    load_faiss,
    save_faiss,
)

pytest_plugins = ["tests.fixtures_chroma"]

DOCUMENTS = [
    Document("Solar panels convert sunlight into electricity.", id="solar", metadata={"n": 1}),
    Document("Wind turbines turn moving air into power.", id="wind", metadata={"n": 2}),
    Document("Batteries store energy for the night.", id="battery", metadata={"n": 3}),
    Document("Hydroelectric dams use falling water.", metadata={"source": "no-id"}),
    Document("Geothermal plants tap heat from the earth.", id="geo"),
]
QUERIES = [document.page_content for document in DOCUMENTS]


class CountingEmbeddings(Embeddings):
    """Wraps embeddings and records every call: ("documents", n_texts) or ("query", 1)."""

    def __init__(self, inner: Embeddings | None = None) -> None:
        self.inner = inner or DeterministicFakeEmbedding(size=32)
        self.model_identity = embedding_identity(self.inner)  # what the manifest records
        self.calls: list[tuple[str, int]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(("documents", len(texts)))
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self.calls.append(("query", 1))
        return self.inner.embed_query(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(("async documents", len(texts)))
        return self.inner.embed_documents(texts)


def cosine(first: list[float], second: list[float]) -> float:
    first_array, second_array = np.asarray(first), np.asarray(second)
    return float(
        first_array @ second_array / np.linalg.norm(first_array) / np.linalg.norm(second_array)
    )


def assert_cosine_scores(results: list[Document], query: str, embeddings: Embeddings) -> None:
    """Each score is the cosine of query and document, and the list is sorted by it."""
    query_vector = embeddings.embed_query(query)
    for document in results:
        expected = cosine(query_vector, embeddings.embed_query(document.page_content))
        assert document.metadata["score"] == pytest.approx(expected, abs=1e-4)
    scores = [document.metadata["score"] for document in results]
    assert scores == sorted(scores, reverse=True)


@pytest.fixture
def embeddings() -> CountingEmbeddings:
    return CountingEmbeddings()


# ---------------------------------------------------------------------------------- FAISS


def test_faiss_scores_are_cosine_similarities_best_first(embeddings: CountingEmbeddings) -> None:
    retriever = VectorRetriever(vectorstore=build_faiss(DOCUMENTS, embeddings), k=5)
    for query in QUERIES[:3]:
        results = retriever.invoke(query)
        assert results[0].page_content == query
        assert results[0].metadata["score"] == pytest.approx(1.0, abs=1e-5)
        assert_cosine_scores(results, query, embeddings.inner)


def test_faiss_preserves_ids_and_never_mutates(embeddings: CountingEmbeddings) -> None:
    snapshot = copy.deepcopy(DOCUMENTS)
    store = build_faiss(DOCUMENTS, embeddings)
    results = VectorRetriever(vectorstore=store, k=5).invoke("anything")
    assert snapshot == DOCUMENTS
    assert {document.id for document in results} == {
        "solar",
        "wind",
        "battery",
        "geo",
        document_id(DOCUMENTS[3]),  # the content hash BM25Retriever uses too
    }
    stored = store.get_by_ids(["solar"])[0]
    assert stored.metadata == {"n": 1}  # the scored copy did not write into the docstore
    assert all(result is not stored for result in results)


def test_faiss_refuses_duplicate_ids(embeddings: CountingEmbeddings) -> None:
    with pytest.raises(ValueError, match="duplicate ids"):
        build_faiss([Document("same"), Document("same")], embeddings)
    with pytest.raises(ValueError, match="documents"):
        build_faiss([], embeddings)


def test_faiss_k_at_invoke_time(embeddings: CountingEmbeddings) -> None:
    retriever = VectorRetriever(vectorstore=build_faiss(DOCUMENTS, embeddings), k=2)
    assert len(retriever.invoke("solar")) == 2
    assert len(retriever.invoke("solar", k=4)) == 4
    assert len(retriever.invoke("solar", k=50)) == len(DOCUMENTS)


def test_batch_embeds_all_queries_in_one_call_and_searches_once(
    embeddings: CountingEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = build_faiss(DOCUMENTS, embeddings)
    retriever = VectorRetriever(vectorstore=store, k=3)
    singles = [retriever.invoke(query) for query in QUERIES]
    searches: list[int] = []
    original_search = store.index.search

    def counting_search(matrix: Any, k: int, **options: Any) -> Any:
        searches.append(len(matrix))
        return original_search(matrix, k, **options)

    monkeypatch.setattr(store.index, "search", counting_search)
    embeddings.calls.clear()
    assert retriever.batch(QUERIES) == singles
    assert embeddings.calls == [("documents", len(QUERIES))]
    assert searches == [len(QUERIES)]

    embeddings.calls.clear()
    retriever.map().invoke(QUERIES[:3])
    assert embeddings.calls == [("documents", 3)]


async def test_abatch_embeds_once(embeddings: CountingEmbeddings) -> None:
    retriever = VectorRetriever(vectorstore=build_faiss(DOCUMENTS, embeddings), k=2)
    embeddings.calls.clear()
    results = await retriever.abatch(QUERIES, k=1)
    assert embeddings.calls == [("async documents", len(QUERIES))]
    assert [result[0].page_content for result in results] == QUERIES


def test_per_query_embedding_for_asymmetric_models(embeddings: CountingEmbeddings) -> None:
    retriever = VectorRetriever(
        vectorstore=build_faiss(DOCUMENTS, embeddings), query_embedding="per_query"
    )
    embeddings.calls.clear()
    retriever.batch(QUERIES[:3])
    assert embeddings.calls == [("query", 1)] * 3


def test_faiss_roundtrip_with_manifest(tmp_path: Path, embeddings: CountingEmbeddings) -> None:
    store = build_faiss(DOCUMENTS, embeddings, path=tmp_path / "index")
    manifest = json.loads((tmp_path / "index" / MANIFEST_FILE).read_text())
    assert set(manifest["files"]) == {"index.faiss", "docstore.json"}
    assert manifest["index"] == "IndexFlat" and manifest["format_version"] == 2
    files = manifest["files"]  # BLAKE3 of the bytes written (index.faiss: of each 4 MiB), named so
    assert files["docstore.json"] == blake3_digest(tmp_path / "index" / "docstore.json")
    assert files["index.faiss"] == block_digests(tmp_path / "index" / "index.faiss", 4 << 20)
    assert manifest["kit_version"] and manifest["documents"] == len(DOCUMENTS)
    assert manifest["embedding"].endswith("DeterministicFakeEmbedding(size=32)")

    loaded = load_faiss(tmp_path / "index", embeddings)
    assert loaded._normalize_L2 is True  # restored from the manifest, not LangChain's default
    original = VectorRetriever(vectorstore=store, k=5)
    reloaded = VectorRetriever(vectorstore=loaded, k=5)
    assert reloaded.batch(QUERIES) == original.batch(QUERIES)


def forge_docstore(directory: Path) -> None:
    """Rewrite one stored text, as someone who can write the folder could."""
    path = directory / "docstore.json"
    path.write_text(path.read_text().replace("Solar panels", "Forged panels"))


def blake3_digest(path: Path) -> str:
    return "blake3:" + blake3.blake3(path.read_bytes()).hexdigest()


def block_digests(path: Path, block_bytes: int) -> dict[str, Any]:
    """The manifest's record of ``index.faiss``: its size and each block's BLAKE3, in order."""
    data = path.read_bytes()
    blocks = [data[start : start + block_bytes] for start in range(0, len(data), block_bytes)]
    digests = ["blake3:" + blake3.blake3(block).hexdigest() for block in blocks]
    return {"bytes": len(data), "block_bytes": block_bytes, "blocks": digests}


def record_whole_file_digests(directory: Path, algorithm: str) -> dict[str, str]:
    """Sign the manifest as earlier kits wrote it: a digest of each whole file (SHA-256 in bare
    hex before BLAKE3, then ``blake3:``)."""
    manifest = json.loads((directory / MANIFEST_FILE).read_text())
    files = {
        name: blake3_digest(directory / name)
        if algorithm == "blake3"
        else hashlib.sha256((directory / name).read_bytes()).hexdigest()
        for name in manifest["files"]
    }
    (directory / MANIFEST_FILE).write_text(json.dumps(sign({**manifest, "files": files})))
    return files


def test_tampered_docstore_is_refused(tmp_path: Path, embeddings: CountingEmbeddings) -> None:
    build_faiss(DOCUMENTS, embeddings, path=tmp_path)
    forge_docstore(tmp_path)
    with pytest.raises(UntrustedIndexError, match="docstore.json.*tampered"):
        load_faiss(tmp_path, embeddings)
    assert issubclass(UntrustedIndexError, ValueError)


@pytest.mark.parametrize("digests", ["blake3 blocks", "blake3", "sha256"])
@pytest.mark.parametrize("name", ["index.faiss", "docstore.json"])
def test_a_changed_bit_is_refused_under_either_digest(
    tmp_path: Path, embeddings: CountingEmbeddings, digests: str, name: str
) -> None:
    """New indexes record BLAKE3 (of each block of index.faiss); the kit's earlier ones (a
    whole-file BLAKE3, or SHA-256 before) still load, verified."""
    store = build_faiss(DOCUMENTS, embeddings, path=tmp_path)
    if digests != "blake3 blocks":
        files = record_whole_file_digests(tmp_path, digests).values()
        assert all(len(digest.removeprefix("blake3:")) == 64 for digest in files)
    loaded = load_faiss(tmp_path, embeddings)
    assert VectorRetriever(vectorstore=loaded).batch(QUERIES) == (
        VectorRetriever(vectorstore=store).batch(QUERIES)
    )
    data = bytearray((tmp_path / name).read_bytes())
    data[data.find(b"Wind") if name == "docstore.json" else len(data) // 2] ^= 1  # still loadable
    (tmp_path / name).write_bytes(bytes(data))
    with pytest.raises(UntrustedIndexError, match=f"{name} does not match the digest recorded"):
        load_faiss(tmp_path, embeddings)
    assert load_faiss(tmp_path, embeddings, trust=True).index.ntotal == len(DOCUMENTS)


def test_a_digest_is_checked_with_the_algorithm_it_names(
    tmp_path: Path, embeddings: CountingEmbeddings
) -> None:
    build_faiss(DOCUMENTS, embeddings, path=tmp_path)
    files = record_whole_file_digests(tmp_path, "sha256")
    manifest = json.loads((tmp_path / MANIFEST_FILE).read_text())
    manifest["files"]["index.faiss"] = "blake3:" + files["index.faiss"]  # SHA-256 hex, named BLAKE3
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(sign(manifest)))
    with pytest.raises(UntrustedIndexError, match="index.faiss does not match"):
        load_faiss(tmp_path, embeddings)


def test_an_index_saved_before_blake3_loads_and_saves_on(
    tmp_path: Path, embeddings: CountingEmbeddings
) -> None:
    build_faiss(DOCUMENTS, embeddings, path=tmp_path / "old")
    old = record_whole_file_digests(tmp_path / "old", "sha256")
    save_faiss(load_faiss(tmp_path / "old", embeddings), tmp_path / "new")
    files = json.loads((tmp_path / "new" / MANIFEST_FILE).read_text())["files"]
    assert files["index.faiss"] == block_digests(tmp_path / "new" / "index.faiss", 4 << 20)
    assert files["docstore.json"] == old["docstore.json"]  # a link to the same bytes, as recorded
    reloaded = load_faiss(tmp_path / "new", embeddings)
    assert [document.id for document in reloaded.docstore._dict.values()] == [
        document.id for document in load_faiss(tmp_path / "old", embeddings).docstore._dict.values()
    ]


def test_a_folder_without_a_faiss_index_is_not_called_unverified(
    tmp_path: Path, embeddings: CountingEmbeddings
) -> None:
    """``load_faiss`` over the directory ``rag-fusion index`` wrote (or any folder without
    ``index.faiss``) said it had no manifest and advised ``trust=True``, which then failed on a
    missing docstore (``BM25Retriever.load``: "index file missing: .versions is a directory"):
    each says there is no such store there and where index directories open."""
    from rag_fusion_chain.retrievers import BM25Retriever, build_index

    (tmp_path / "notes.md").write_text("Heat pumps move heat from outside air.", "utf-8")
    build_index([str(tmp_path / "notes.md")], tmp_path / "index", embedding=embeddings)
    for folder in (tmp_path / "index", tmp_path):
        for trust in (False, True):
            with pytest.raises(
                FileNotFoundError, match=r"no FAISS index \(index.faiss\) in .*open_index"
            ):
                load_faiss(folder, embeddings, trust=trust)
        with pytest.raises(FileNotFoundError, match=r"no BM25 retriever.json in .*open_index"):
            BM25Retriever.load(folder)  # said "index file missing: .../.versions is a directory"


def test_missing_manifest_is_refused_unless_trusted(
    tmp_path: Path, embeddings: CountingEmbeddings
) -> None:
    build_faiss(DOCUMENTS, embeddings, path=tmp_path)
    (tmp_path / MANIFEST_FILE).unlink()
    with pytest.raises(UntrustedIndexError, match="no manifest.json"):
        load_faiss(tmp_path, embeddings)
    store = load_faiss(tmp_path, embeddings, trust=True)
    assert store.index.ntotal == len(DOCUMENTS)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig"])
def test_a_manifest_is_utf8_json(
    tmp_path: Path, embeddings: CountingEmbeddings, encoding: str
) -> None:
    build_faiss(DOCUMENTS, embeddings, path=tmp_path)
    manifest = tmp_path / MANIFEST_FILE
    manifest.write_bytes(manifest.read_text().encode(encoding))
    with pytest.raises(UntrustedIndexError, match="is not valid JSON"):
        load_faiss(tmp_path, embeddings)


def test_trust_loads_files_that_do_not_match_the_manifest(
    tmp_path: Path, embeddings: CountingEmbeddings
) -> None:
    build_faiss(DOCUMENTS, embeddings, path=tmp_path / "first")
    build_faiss(DOCUMENTS[:2], embeddings, path=tmp_path / "second")
    for name in ("index.faiss", "docstore.json"):
        (tmp_path / "first" / name).write_bytes((tmp_path / "second" / name).read_bytes())
    with pytest.raises(UntrustedIndexError):
        load_faiss(tmp_path / "first", embeddings)
    assert load_faiss(tmp_path / "first", embeddings, trust=True).index.ntotal == 2


def test_manifest_listing_other_files_is_refused(
    tmp_path: Path, embeddings: CountingEmbeddings
) -> None:
    build_faiss(DOCUMENTS, embeddings, path=tmp_path)
    manifest = json.loads((tmp_path / MANIFEST_FILE).read_text())
    manifest["files"]["../elsewhere.pkl"] = "0" * 64
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(UntrustedIndexError, match="signature .* does not verify"):
        load_faiss(tmp_path, embeddings)
    signed = {**manifest, "signature": signature_of(manifest, signing_key())}
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(signed))  # as if the kit had written it
    with pytest.raises(
        UntrustedIndexError, match=r"must list \[.docstore.json., .index.faiss.\], not"
    ):
        load_faiss(tmp_path, embeddings)


def forge_manifest(directory: Path, signature: str | None) -> None:
    """Forge a stored text and rewrite the manifest's hashes to match it."""
    forge_docstore(directory)
    manifest = json.loads((directory / MANIFEST_FILE).read_text())
    manifest["files"] = {name: blake3_digest(directory / name) for name in manifest["files"]}
    manifest.pop("signature")
    if signature is not None:
        manifest["signature"] = signature
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))


@pytest.mark.parametrize(
    "signature",
    [None, "kept", "hmac-sha256:" + "0" * 64, "another key", "hmac-sha256:é"],
)
def test_rewritten_hashes_with_a_forged_manifest_are_refused(
    tmp_path: Path, embeddings: CountingEmbeddings, signature: str | None
) -> None:
    build_faiss(DOCUMENTS, embeddings, path=tmp_path)
    original = json.loads((tmp_path / MANIFEST_FILE).read_text())["signature"]
    if signature == "kept":
        signature = original
    elif signature == "another key":
        manifest = json.loads((tmp_path / MANIFEST_FILE).read_text())
        signature = signature_of(manifest, b"k" * 32)  # right scheme, attacker's key
    forge_manifest(tmp_path, signature)
    expected = "not signed" if signature is None else "does not verify"
    with pytest.raises(UntrustedIndexError, match=expected) as refused:
        load_faiss(tmp_path, embeddings)
    assert "trust=True" in str(refused.value) and "--trust-index" in str(refused.value)
    assert "Rebuild the index on this machine" in str(refused.value)


def test_an_index_signed_with_another_key_is_refused_unless_trusted(
    tmp_path: Path, embeddings: CountingEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_faiss(DOCUMENTS, embeddings, path=tmp_path / "theirs")  # the session's key
    monkeypatch.setenv(SIGNING_KEY_ENV, str(tmp_path / "keys" / "mine.key"))
    with pytest.raises(UntrustedIndexError, match="no index signing key"):
        load_faiss(tmp_path / "theirs", embeddings)
    build_faiss(DOCUMENTS[:2], embeddings, path=tmp_path / "mine")  # makes this user's key
    assert load_faiss(tmp_path / "mine", embeddings).index.ntotal == 2
    with pytest.raises(UntrustedIndexError, match="another user or machine"):
        load_faiss(tmp_path / "theirs", embeddings)
    assert load_faiss(tmp_path / "theirs", embeddings, trust=True).index.ntotal == len(DOCUMENTS)


def test_the_signing_key_is_made_once_private_and_reused(
    tmp_path: Path, embeddings: CountingEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "config" / "rag-fusion-chain" / "index-signing.key"
    monkeypatch.delenv(SIGNING_KEY_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert signing_key_file() == key_file
    build_faiss(DOCUMENTS, embeddings, path=tmp_path / "first")
    key = key_file.read_text()
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert len(bytes.fromhex(key.strip())) == 32
    build_faiss(DOCUMENTS, embeddings, path=tmp_path / "second")
    assert key_file.read_text() == key
    assert [path.name for path in key_file.parent.iterdir()] == [key_file.name]
    signature = json.loads((tmp_path / "first" / MANIFEST_FILE).read_text())["signature"]
    assert signature.startswith("hmac-sha256:") and key.strip() not in signature
    key_file.write_text("not a key")
    with pytest.raises(ValueError, match="not an index signing key"):
        load_faiss(tmp_path / "first", embeddings)


def test_missing_and_corrupt_indexes_fail_clearly(
    tmp_path: Path, embeddings: CountingEmbeddings
) -> None:
    with pytest.raises(FileNotFoundError, match="no-such-index"):
        load_faiss(tmp_path / "no-such-index", embeddings)
    build_faiss(DOCUMENTS, embeddings, path=tmp_path / "corrupt")
    (tmp_path / "corrupt" / "index.faiss").write_bytes(b"not a faiss index")
    with pytest.raises(UntrustedIndexError, match="corrupted or tampered"):
        load_faiss(tmp_path / "corrupt", embeddings)
    with pytest.raises(ValueError, match="corrupt"):
        load_faiss(tmp_path / "corrupt", embeddings, trust=True)
    build_faiss(DOCUMENTS, embeddings, path=tmp_path / "incomplete")
    (tmp_path / "incomplete" / "docstore.json").unlink()
    with pytest.raises(FileNotFoundError, match="docstore.json"):
        load_faiss(tmp_path / "incomplete", embeddings)


def test_loading_with_other_embeddings_warns(
    tmp_path: Path, embeddings: CountingEmbeddings
) -> None:
    build_faiss(DOCUMENTS, DeterministicFakeEmbedding(size=32), path=tmp_path)
    with pytest.warns(UserWarning, match="built with embeddings"):
        load_faiss(tmp_path, DeterministicFakeEmbedding(size=16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_faiss(tmp_path, DeterministicFakeEmbedding(size=32))


# ------------------------------------------------------- precomputed vectors, index types, threads


class NumpyEmbeddings(CountingEmbeddings):
    """Returns numpy arrays, as the kit's embedders can."""

    def embed_documents(self, texts: list[str]) -> Any:
        return np.asarray(super().embed_documents(texts), dtype=np.float32)


def random_vectors(count: int, dimension: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, dimension)).astype(np.float32)


def test_precomputed_vectors_are_used_without_embedding_and_not_mutated(
    embeddings: CountingEmbeddings,
) -> None:
    vectors = np.asarray(embeddings.inner.embed_documents(QUERIES), dtype=np.float32) * 3.0
    given = vectors.copy()
    store = build_faiss(DOCUMENTS, embeddings, vectors=vectors)
    assert embeddings.calls == []
    np.testing.assert_array_equal(vectors, given)  # normalised in copies only
    embedded = build_faiss(DOCUMENTS, NumpyEmbeddings(embeddings.inner))
    retriever, reference = VectorRetriever(vectorstore=store), VectorRetriever(vectorstore=embedded)
    pairs = zip(retriever.batch(QUERIES, k=3), reference.batch(QUERIES, k=3), strict=True)
    for hits, expected in pairs:
        assert [hit.id for hit in hits] == [hit.id for hit in expected]
        assert [hit.metadata["score"] for hit in hits] == pytest.approx(
            [hit.metadata["score"] for hit in expected], abs=1e-5
        )


def test_unit_scaled_float64_and_fortran_vectors_give_the_same_index(
    embeddings: CountingEmbeddings,
) -> None:
    unit = random_vectors(len(DOCUMENTS))
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    layouts = [unit, unit * 5.0, unit.astype(np.float64), np.asfortranarray(unit)]
    originals = [layout.copy() for layout in layouts]
    stores = [build_faiss(DOCUMENTS, embeddings, vectors=layout) for layout in layouts]
    for layout, original in zip(layouts, originals, strict=True):
        np.testing.assert_array_equal(layout, original)  # never normalised in place
    expected = VectorRetriever(vectorstore=stores[0]).search_vectors(unit, 3)
    for store in stores[1:]:
        found = VectorRetriever(vectorstore=store).search_vectors(unit, 3)
        assert [[hit.id for hit in hits] for hits in found] == [
            [hit.id for hit in hits] for hits in expected
        ]
        assert [hit.metadata["score"] for hits in found for hit in hits] == pytest.approx(
            [hit.metadata["score"] for hits in expected for hit in hits], abs=1e-5
        )
    zero = unit.copy()
    zero[0] = 0.0  # a zero row stays a zero row, as FAISS's own normalisation leaves it
    assert VectorRetriever(vectorstore=build_faiss(DOCUMENTS, embeddings, vectors=zero)).invoke("x")


@pytest.mark.parametrize(
    ("vectors", "message"),
    [
        (np.zeros((4, 32), dtype=np.float32), "expected 5 rows"),
        (np.zeros(5, dtype=np.float32), "expected 5 rows"),
        (np.full((5, 32), np.nan, dtype=np.float32), "NaN"),
    ],
)
def test_bad_precomputed_vectors_are_named(
    embeddings: CountingEmbeddings, vectors: np.ndarray, message: str
) -> None:
    with pytest.raises(ValueError, match=f"vectors: .*{message}"):
        build_faiss(DOCUMENTS, embeddings, vectors=vectors)


def test_vectors_of_other_embeddings_than_the_index_are_named(
    embeddings: CountingEmbeddings,
) -> None:
    # Precomputed vectors of another model: the search was FAISS's bare AssertionError, reported
    # by the fan-out as "VectorRetriever (AssertionError: )".
    store = build_faiss(DOCUMENTS, embeddings, vectors=random_vectors(len(DOCUMENTS), dimension=10))
    retriever = VectorRetriever(vectorstore=store)
    width = len(embeddings.embed_query("x"))
    with pytest.raises(ValueError, match=f"vectors: {width}-dimensional queries, 10-dimensional"):
        retriever.invoke("honey")


@pytest.mark.parametrize(
    ("index", "faiss_class"),
    [("hnsw", "IndexHNSWFlat"), ("IVF4,Flat", "IndexIVFFlat"), ("IVF4,PQ8", "IndexIVFPQ")],
)
def test_the_index_type_round_trips_through_save_and_load(
    tmp_path: Path, embeddings: CountingEmbeddings, index: str, faiss_class: str
) -> None:
    documents = [Document(f"passage {n}", id=f"p{n}") for n in range(300)]
    vectors = random_vectors(len(documents))
    built = build_faiss(documents, embeddings, tmp_path, vectors=vectors, index=index)
    assert json.loads((tmp_path / MANIFEST_FILE).read_text())["index"] == faiss_class
    loaded = load_faiss(tmp_path, embeddings)
    assert type(loaded.index).__name__ == faiss_class and loaded.index.ntotal == len(documents)
    retriever = VectorRetriever(vectorstore=loaded, embeddings=embeddings)
    reference = VectorRetriever(vectorstore=built, embeddings=embeddings)
    assert retriever.search_vectors(vectors[:5].tolist(), 5) == reference.search_vectors(
        vectors[:5].tolist(), 5
    )


def test_an_unknown_index_type_is_named(embeddings: CountingEmbeddings) -> None:
    with pytest.raises(
        ValueError, match=r"index: FAISS cannot make 'annoy' .*'hnsw', 'ivfpq'\] or a"
    ):
        build_faiss(DOCUMENTS, embeddings, index="annoy")


def test_an_index_too_large_to_train_on_the_collection_is_named(
    embeddings: CountingEmbeddings,
) -> None:
    # 'ivfpq' (1,024 lists) over a small folder was FAISS's C++ RuntimeError, after the embedding
    vectors = random_vectors(len(DOCUMENTS), dimension=48)
    with pytest.raises(ValueError, match=r"index: 'ivfpq' cannot be trained on 5 vectors .*'hnsw'"):
        build_faiss(DOCUMENTS, embeddings, vectors=vectors, index="ivfpq")
    # PQ2 cannot split 17 dimensions: 'ivfpq' is a known name, not "not one of"
    with pytest.raises(ValueError) as refused:
        build_faiss(DOCUMENTS, embeddings, vectors=random_vectors(5, dimension=17), index="ivfpq")
    assert "FAISS cannot make 'ivfpq' for 17-dimensional vectors" in str(refused.value)
    assert "not one of" not in str(refused.value)


def test_ivfpq_stores_a_byte_per_eight_dimensions(embeddings: CountingEmbeddings) -> None:
    made = [empty_faiss_index("ivfpq", dimension).pq.M for dimension in (384, 1024, 1536)]
    assert made == [48, 128, 192]  # MiniLM's PQ48 as before; the others were refused
    documents = [Document(f"passage {n}", id=f"p{n}") for n in range(1100)]  # IVF1024 trains
    vectors = random_vectors(len(documents))  # 32 dimensions: PQ4, refused before
    store = build_faiss(documents, embeddings, vectors=vectors, index="ivfpq")
    assert store.index.pq.M == 4 and store.index.nlist == 1024
    probe_all = VectorRetriever(vectorstore=store, search_parameters={"nprobe": 1024})
    assert len(probe_all.search_vectors(vectors[:1], 3)[0]) == 3


class RecordingIndex:
    """Stands in for a FAISS index and records the search parameters of each call."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.ntotal, self.d, self.calls = inner, inner.ntotal, inner.d, []

    def search(self, matrix: np.ndarray, k: int, params: Any = None) -> Any:
        self.calls.append(params)
        return self.inner.search(matrix, k, params=params)

    def __getattr__(self, name: str) -> Any:  # the index's kind: hnsw, nprobe
        return getattr(self.inner, name)


@pytest.mark.parametrize(
    ("index", "parameters", "field"),
    [("hnsw", {"efSearch": 7}, "efSearch"), ("IVF4,Flat", {"nprobe": 3}, "nprobe")],
)
def test_search_parameters_reach_faiss_per_call(
    embeddings: CountingEmbeddings, index: str, parameters: dict[str, int], field: str
) -> None:
    documents = [Document(f"passage {n}", id=f"p{n}") for n in range(300)]
    vectors = random_vectors(len(documents))
    store = build_faiss(documents, embeddings, vectors=vectors, index=index)
    recording = RecordingIndex(store.index)
    store.index = recording
    retriever = VectorRetriever(vectorstore=store, search_parameters=parameters)
    configured = VectorRetriever(vectorstore=store)
    retriever.search_vectors(vectors[:2].tolist(), 3)
    configured.search_vectors(vectors[:2].tolist(), 3)
    assert getattr(recording.calls[0], field) == parameters[field]
    assert recording.calls[1] is None  # the index's own setting when none is given
    other = {"efSearch": {"nprobe": 3}, "nprobe": {"efSearch": 7}}[field]
    for refused in ({"ef": 1}, other, {**parameters, **other}):  # FAISS would ignore the other kind
        with pytest.raises(ValueError, match="search_parameters: expected"):
            VectorRetriever(vectorstore=store, search_parameters=refused).search_vectors(
                vectors[:1].tolist(), 3
            )


def test_search_parameters_of_no_kind_are_refused_for_a_flat_index(
    embeddings: CountingEmbeddings,
) -> None:
    store = build_faiss(DOCUMENTS, embeddings, vectors=random_vectors(len(DOCUMENTS)))
    for parameters in ({"efSearch": 64}, {"nprobe": 4}):  # FAISS's flat search ignores both
        retriever = VectorRetriever(vectorstore=store, search_parameters=parameters)
        with pytest.raises(ValueError, match="for IndexFlat"):
            retriever.search_vectors(random_vectors(1).tolist(), 2)


def test_exhaustive_ivf_probing_finds_what_flat_finds(embeddings: CountingEmbeddings) -> None:
    documents = [Document(f"passage {n}", id=f"p{n}") for n in range(400)]
    vectors = random_vectors(len(documents), seed=1)
    queries = random_vectors(10, seed=2).tolist()
    flat = VectorRetriever(vectorstore=build_faiss(documents, embeddings, vectors=vectors))
    ivf_store = build_faiss(documents, embeddings, vectors=vectors, index="IVF8,Flat")
    one_list = VectorRetriever(vectorstore=ivf_store, search_parameters={"nprobe": 1})
    all_lists = VectorRetriever(vectorstore=ivf_store, search_parameters={"nprobe": 8})

    def ids(retriever: VectorRetriever) -> list[list[str | None]]:
        return [[hit.id for hit in hits] for hits in retriever.search_vectors(queries, 10)]

    assert ids(all_lists) == ids(flat)
    assert ids(one_list) != ids(flat)  # nprobe=1 misses neighbours in other lists


def test_faiss_searches_use_the_thread_policy(
    embeddings: CountingEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import faiss

    from rag_fusion_chain.retrievers.stores import FAISS_THREADS_ENV

    threads: list[int] = []
    monkeypatch.setattr(faiss, "omp_set_num_threads", threads.append)
    store = build_faiss(DOCUMENTS, embeddings)
    VectorRetriever(vectorstore=store).batch(QUERIES[:2])
    monkeypatch.setenv(FAISS_THREADS_ENV, "2")
    VectorRetriever(vectorstore=store).invoke(QUERIES[0])
    VectorRetriever(vectorstore=store, faiss_threads=3).invoke(QUERIES[0])
    assert threads == [1, 2, 3]
    monkeypatch.setenv(FAISS_THREADS_ENV, "none")
    with pytest.raises(ValueError, match=f"{FAISS_THREADS_ENV} must be a positive integer"):
        VectorRetriever(vectorstore=store)


# ---------------------------------------------------------------------------------- other stores


def test_generic_store_uses_its_similarity_scores(embeddings: CountingEmbeddings) -> None:
    store = InMemoryVectorStore.from_documents(DOCUMENTS, embeddings)
    retriever = VectorRetriever(vectorstore=store, k=3)
    results = retriever.invoke(QUERIES[1])
    assert results[0].id == "wind"
    assert_cosine_scores(results, QUERIES[1], embeddings.inner)
    negated = VectorRetriever(vectorstore=store, k=3, relevance_function=lambda score: -score)
    assert negated.invoke(QUERIES[1])[0].metadata["score"] == pytest.approx(-1.0, abs=1e-5)


def test_store_without_embeddings_needs_them() -> None:
    class NoEmbeddings(InMemoryVectorStore):
        @property
        def embeddings(self) -> None:
            return None

    with pytest.raises(ValueError, match="embeddings"):
        VectorRetriever(vectorstore=NoEmbeddings(DeterministicFakeEmbedding(size=4)))


def test_real_minilm_ranks_by_meaning(minilm: Embeddings) -> None:
    retriever = VectorRetriever(vectorstore=build_faiss(DOCUMENTS, minilm), k=2)
    results = retriever.batch(["How is electricity made from sunlight?", "storing energy"])
    assert [result[0].id for result in results] == ["solar", "battery"]
    assert 0 < results[0][0].metadata["score"] <= 1


def test_openai_embeddings_send_one_request_for_all_queries(clean_openai_stub: Any) -> None:
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(
        model="stub-embedding",
        base_url=clean_openai_stub.base_url,
        api_key="sk-test",
        check_embedding_ctx_length=False,
    )
    retriever = VectorRetriever(vectorstore=build_faiss(DOCUMENTS, embeddings), k=2)
    before = clean_openai_stub.counts["embeddings"]
    results = retriever.batch(QUERIES)
    assert clean_openai_stub.counts["embeddings"] - before == 1
    assert clean_openai_stub.embedding_batch_sizes[-1] == len(QUERIES)
    assert [result[0].page_content for result in results] == QUERIES


# ---------------------------------------------------------------------------------- Chroma


def test_chroma_persistent_roundtrip(tmp_path: Path, embeddings: CountingEmbeddings) -> None:
    snapshot = copy.deepcopy(DOCUMENTS)
    store = build_chroma(
        DOCUMENTS, embeddings, persist_directory=tmp_path, collection_name="energy"
    )
    assert snapshot == DOCUMENTS
    loaded = load_chroma(embeddings, persist_directory=tmp_path, collection_name="energy")
    retriever = VectorRetriever(vectorstore=loaded, k=5)
    results = retriever.invoke(QUERIES[3])
    assert results[0].id == document_id(DOCUMENTS[3])
    assert results[0].metadata == {"source": "no-id", "score": pytest.approx(1.0, abs=1e-5)}
    assert {document.id for document in results} == {
        document.id or document_id(document) for document in DOCUMENTS
    }
    assert_cosine_scores(results, QUERIES[3], embeddings.inner)
    assert VectorRetriever(vectorstore=store, k=5).invoke(QUERIES[3]) == results


def test_chroma_and_faiss_agree_on_scores(tmp_path: Path, embeddings: CountingEmbeddings) -> None:
    chroma = VectorRetriever(vectorstore=build_chroma(DOCUMENTS, embeddings), k=5)
    faiss = VectorRetriever(vectorstore=build_faiss(DOCUMENTS, embeddings), k=5)
    for chroma_results, faiss_results in zip(
        chroma.batch(QUERIES), faiss.batch(QUERIES), strict=True
    ):
        assert [document.id for document in chroma_results] == [
            document.id for document in faiss_results
        ]
        assert [document.metadata["score"] for document in chroma_results] == pytest.approx(
            [document.metadata["score"] for document in faiss_results], abs=1e-4
        )


def test_chroma_batch_is_one_embedding_and_one_query(
    tmp_path: Path, embeddings: CountingEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = build_chroma(DOCUMENTS, embeddings, persist_directory=tmp_path)
    collection_class = type(store._collection)
    queries: list[int] = []
    original_query = collection_class.query

    def counting_query(self: Any, *args: Any, **kwargs: Any) -> Any:
        queries.append(len(kwargs["query_embeddings"]))
        return original_query(self, *args, **kwargs)

    monkeypatch.setattr(collection_class, "query", counting_query)
    embeddings.calls.clear()
    results = VectorRetriever(vectorstore=store, k=1).batch(QUERIES)
    assert embeddings.calls == [("documents", len(QUERIES))]
    assert queries == [len(QUERIES)]
    assert [result[0].page_content for result in results] == QUERIES


def test_chroma_load_errors(tmp_path: Path, embeddings: CountingEmbeddings) -> None:
    with pytest.raises(FileNotFoundError, match="missing-dir"):
        load_chroma(embeddings, persist_directory=tmp_path / "missing-dir")
    build_chroma(DOCUMENTS, embeddings, persist_directory=tmp_path, collection_name="energy")
    with pytest.raises(ValueError, match=r"no Chroma collection 'other'.*\['energy'\]"):
        load_chroma(embeddings, persist_directory=tmp_path, collection_name="other")
    with pytest.raises(ValueError, match="give one of"):
        build_chroma(DOCUMENTS, embeddings, persist_directory=tmp_path, host="127.0.0.1")
    with pytest.warns(UserWarning, match="built with embeddings"):
        load_chroma(
            DeterministicFakeEmbedding(size=16),
            persist_directory=tmp_path,
            collection_name="energy",
        )


def test_a_chroma_server_that_does_not_answer_is_named(embeddings: CountingEmbeddings) -> None:
    """Chroma's "Could not connect to a Chroma server. Are you sure it is running?" did not say
    where it looked (RAG_FUSION_CHROMA_URL set in another shell, a mistyped port)."""
    pytest.importorskip("chromadb")
    from tests.fixtures_chroma import _free_port

    port = _free_port()  # nothing listens there
    with pytest.raises(ValueError, match=rf"Could not connect .* \(at 127\.0\.0\.1:{port}"):
        load_chroma(embeddings, host="127.0.0.1", port=port)


@pytest.mark.timeout(60)  # a hang guard: chromadb's own first request waits without a bound
def test_a_chroma_server_that_never_answers_is_a_timeout_not_a_hang() -> None:
    """A server (or proxy) that accepts connections and never replies: chromadb's client asks it
    for the tenant while it is made, with no timeout; the kit's client gives up after its bound."""
    pytest.importorskip("chromadb")
    import socket

    from rag_fusion_chain.retrievers.stores import chroma_http_client

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # the kernel accepts connections; nobody reads or answers
        port = listener.getsockname()[1]
        with pytest.raises(
            TimeoutError, match=rf"127\.0\.0\.1:{port} did not answer within 0\.5 s"
        ):
            chroma_http_client("127.0.0.1", port, timeout=0.5)


def test_chroma_server_roundtrip(chroma_server: Any, embeddings: CountingEmbeddings) -> None:
    name = f"energy-{uuid.uuid4().hex[:8]}"
    build_chroma(
        DOCUMENTS,
        embeddings,
        host=chroma_server.host,
        port=chroma_server.port,
        collection_name=name,
    )
    loaded = load_chroma(
        embeddings, host=chroma_server.host, port=chroma_server.port, collection_name=name
    )
    session = loaded._client._server._session  # chromadb's own waits without a bound
    assert session.timeout.read == CHROMA_TIMEOUT_SECONDS
    retriever = VectorRetriever(vectorstore=loaded, k=2)
    embeddings.calls.clear()
    results = retriever.batch(QUERIES)
    assert embeddings.calls == [("documents", len(QUERIES))]
    assert [result[0].id for result in results] == [
        document.id or document_id(document) for document in DOCUMENTS
    ]
    assert results[0][0].metadata == {"n": 1, "score": pytest.approx(1.0, abs=1e-5)}
    assert_cosine_scores(results[1], QUERIES[1], embeddings.inner)
    with pytest.raises(ValueError, match="no Chroma collection"):
        load_chroma(
            embeddings, host=chroma_server.host, port=chroma_server.port, collection_name="absent"
        )


USER_CHROMA = (
    "user = Chroma.from_documents([Document('their passage')], DeterministicFakeEmbedding(size=8))"
)
KIT_CHROMA = "kit = build_chroma([Document('a passage')], DeterministicFakeEmbedding(size=8))"


@pytest.mark.parametrize("first, second", [(USER_CHROMA, KIT_CHROMA), (KIT_CHROMA, USER_CHROMA)])
def test_the_kit_and_the_users_in_memory_chroma_work_in_either_order(
    first: str, second: str
) -> None:
    """Chroma allows one in-memory system per process, and refuses a second client with other
    settings: the kit's store and a user's ``Chroma.from_documents`` (default settings) must both
    work, whichever comes first. A fresh process, so no other test's client is there first."""
    script = "\n".join(
        [
            "from langchain_chroma import Chroma",
            "from langchain_core.documents import Document",
            "from langchain_core.embeddings import DeterministicFakeEmbedding",
            "from rag_fusion_chain.retrievers.stores import build_chroma",
            first,
            second,
            "print(kit.similarity_search('a passage', k=1)[0].page_content)",
            "print(user.similarity_search('their passage', k=1)[0].page_content)",
        ]
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["a", "passage", "their", "passage"]


def test_a_loaded_store_can_be_added_to_deleted_from_and_saved_again(
    tmp_path: Path, embeddings: CountingEmbeddings
) -> None:
    build_faiss(DOCUMENTS, embeddings, path=tmp_path / "first")
    store = load_faiss(tmp_path / "first", embeddings)
    assert "solar" in store.docstore._dict and len(store.docstore._dict) == len(DOCUMENTS)
    store.add_documents([Document("Tidal power follows the moon.", id="tidal")], ids=["tidal"])
    # added into the columns' mapping: LangChain's add would copy every stored Document to a dict
    assert type(store.docstore._dict).__name__ == "DocumentsById"
    assert store.docstore.search("tidal").page_content == "Tidal power follows the moon."
    with pytest.raises(ValueError, match="ids that already exist: \\['solar'\\]"):
        store.docstore.add({"solar": Document("Solar again.", id="solar")})
    store.delete(["wind"])
    save_faiss(store, tmp_path / "second")
    reloaded = load_faiss(tmp_path / "second", embeddings)
    texts = sorted(document.page_content for document in reloaded.docstore._dict.values())
    expected = [document.page_content for document in DOCUMENTS if document.id != "wind"]
    assert texts == sorted([*expected, "Tidal power follows the moon."])
    assert reloaded.docstore.search("solar").metadata == {"n": 1}


def test_a_loaded_store_saved_by_langchain_loads_back_through_the_allow_list(
    tmp_path: Path, embeddings: CountingEmbeddings
) -> None:
    build_faiss(DOCUMENTS, embeddings, path=tmp_path / "kit")
    loaded = load_faiss(tmp_path / "kit", embeddings)
    loaded.add_documents([Document("Tidal power follows the moon.", id="tidal")], ids=["tidal"])
    loaded.save_local(str(tmp_path / "langchain"))
    reloaded = load_faiss(tmp_path / "langchain", embeddings, trust=True)
    assert type(reloaded.docstore).__name__ == "InMemoryDocstore"  # LangChain's own class
    assert (
        type(reloaded.docstore._dict) is dict and len(reloaded.docstore._dict) == len(DOCUMENTS) + 1
    )
    solar = reloaded.docstore.search("solar")
    assert isinstance(solar, Document) and solar.id == "solar" and solar.metadata == {"n": 1}


def test_a_signed_index_of_the_kits_pickle_format_loads_verified_without_trust(
    tmp_path: Path,
) -> None:
    """Indexes saved before the JSON docstore (format 1: a signed ``index.pkl``) load as they are,
    their pickle hashed and checked against the signed manifest first; a changed pickle is refused."""
    import pickle

    documents = [Document("Heat pumps move heat.", id="a"), Document("Kelp grows fast.", id="b")]
    embeddings = DeterministicFakeEmbedding(size=32)
    store = build_faiss(documents, embeddings)
    directory = save_faiss(store, tmp_path / "old")
    (directory / "docstore.json").unlink()
    pickled = pickle.dumps((store.docstore, store.index_to_docstore_id))
    (directory / "index.pkl").write_bytes(pickled)
    manifest = json.loads((directory / MANIFEST_FILE).read_text())
    files = {  # SHA-256, as the kit recorded then
        name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
        for name in ("index.faiss", "index.pkl")
    }
    old = {**manifest, "format_version": 1, "files": files}
    (directory / MANIFEST_FILE).write_text(json.dumps(sign(old)))

    loaded = load_faiss(directory, embeddings)
    assert [hit.page_content for hit in loaded.similarity_search("Kelp grows fast.", k=2)][
        0
    ] == "Kelp grows fast."

    (directory / "index.pkl").write_bytes(pickled.replace(b"Kelp", b"Kelq"))
    with pytest.raises(UntrustedIndexError):
        load_faiss(directory, embeddings)


@pytest.mark.parametrize("enabled", [True, False])
def test_parsing_the_docstore_leaves_the_garbage_collector_as_it_was(enabled: bool) -> None:
    import gc

    from rag_fusion_chain.retrievers.columns import parse_columns

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        assert parse_columns(b'{"ids":["a"],"texts":["t"],"metadatas":[{"n":1}]}')["ids"] == ["a"]
        assert gc.isenabled() is enabled
        with pytest.raises(json.JSONDecodeError):
            parse_columns(b'{"ids":[')
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_columns_are_read_an_id_or_a_text_a_line_and_other_layouts_whole(tmp_path: Path) -> None:
    from rag_fusion_chain.retrievers.columns import columns_json, read_columns

    def read(data: bytes) -> Any:
        path.write_bytes(data)
        with path.open("rb") as file:
            return read_columns(file)

    documents = [
        Document('two\nlines ] "quoted", é 光', id="a,\n", metadata={"n": 10**30}),
        Document("]", id="b"),
    ]
    path = tmp_path / "documents.json"
    written = b"".join(columns_json(documents, path))
    assert len(written.splitlines()) == 3 + 2 * len(documents)  # ids and texts one a line
    expected = json.loads(written)
    assert expected["metadatas"][0]["n"] == 10**30  # an int beyond 64 bits, as json reads it
    assert read(written) == expected
    whole_reads = io.BytesIO(written)
    whole_reads.read = None  # type: ignore[method-assign]  # the layout is read by lines only
    assert read_columns(whole_reads) == expected
    assert read(json.dumps(expected).encode()) == expected  # another layout: parsed whole
    lone = b'{"ids":[\n  "a"\n],"texts":[\n  "\\ud800"\n],"metadatas":[{}]}'
    assert read(lone)["texts"] == ["\ud800"]  # refused by orjson, read as json reads it
    for corrupt in (written[:-40], written.replace(b'",\n', b'"\n', 1), written + b"\n["):
        with pytest.raises(json.JSONDecodeError):  # truncated, a comma missing, extra data
            read(corrupt)


def test_documents_saved_by_bm25_are_linked_not_written_again_unless_they_changed(
    tmp_path: Path, embeddings: CountingEmbeddings
) -> None:
    import os

    from rag_fusion_chain.retrievers.bm25 import BM25Retriever

    def stored_texts(store: Any) -> list[str]:
        return [
            store.docstore.search(identifier).page_content
            for identifier in store.index_to_docstore_id.values()
        ]

    bm25 = BM25Retriever.from_documents(DOCUMENTS)
    bm25.save(tmp_path / "bm25")
    store = build_faiss(bm25.documents, embeddings, path=tmp_path / "linked")
    documents = tmp_path / "bm25" / "documents.json"
    assert os.path.samefile(tmp_path / "linked" / "docstore.json", documents)
    assert stored_texts(load_faiss(tmp_path / "linked", embeddings)) == stored_texts(store)
    other = tmp_path / "other.json"  # another file of other bytes in its place
    other.write_bytes(documents.read_bytes().replace(b"Solar panels", b"Forged panels"))
    other.replace(documents)
    save_faiss(store, tmp_path / "written")
    assert not os.path.samefile(tmp_path / "written" / "docstore.json", documents)
    assert stored_texts(load_faiss(tmp_path / "written", embeddings)) == stored_texts(store)
    with (tmp_path / "linked" / "docstore.json").open("r+b") as handle:  # rewritten in place
        handle.write(b" ")
    with pytest.raises(UntrustedIndexError, match="docstore.json does not match"):
        load_faiss(tmp_path / "linked", embeddings)


def test_metadata_keeps_the_json_modules_values_and_refusals(tmp_path: Path) -> None:
    import math

    from rag_fusion_chain.retrievers.bm25 import BM25Retriever

    nested = {"score": math.nan, "none": None, "flag": True, "pages": [1, 2]}
    for metadatas in ([nested], [{"score": math.inf, "page": 3}], [{"n": 1.5, "none": None}]):
        documents = [Document(str(n), id=str(n), metadata=m) for n, m in enumerate(metadatas)]
        BM25Retriever.from_documents(documents).save(tmp_path / "saved")
        (loaded,) = (
            document.metadata for document in BM25Retriever.load(tmp_path / "saved").documents
        )
        assert {**loaded, "score": 0} == {**metadatas[0], "score": 0}
        assert repr(loaded.get("score")) == repr(metadatas[0].get("score"))  # nan, inf: not null
    for refused in (uuid.uuid4(), 2**70 * 1.0j, {1, 2}):
        bad = BM25Retriever.from_documents([Document("c", id="c", metadata={"x": refused})])
        with pytest.raises(ValueError, match="metadata must be JSON data"):
            bad.save(tmp_path / "bad")


def test_the_column_mapping_takes_a_batch_as_a_dict_would() -> None:
    from rag_fusion_chain.retrievers.columns import DocumentsById, StoredDocuments

    stored = StoredDocuments(["a", "b"], ["alpha", "beta"], [{}, {}])
    mapping, plain = DocumentsById(stored), {"a": stored[0], "b": stored[1]}
    batch = {"c": Document("gamma", id="c"), "a": Document("alpha again", id="a")}
    for target in (mapping, plain):
        target.update(batch, d=Document("delta", id="d"))
        del target["b"]
    assert list(mapping) == list(plain) == ["a", "c", "d"]
    assert {key: doc.page_content for key, doc in mapping.items()} == {
        key: doc.page_content for key, doc in plain.items()
    }
    assert "c" in mapping and "b" not in mapping and 3 not in mapping
    assert stored[0].page_content == "alpha"  # the stored columns are not written
