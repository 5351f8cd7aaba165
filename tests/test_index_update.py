"""Updating an index (issue 21 item 3): only new and changed sources are embedded, the result
equals a full rebuild's, an interrupted update keeps the old index; ``--faiss-index``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from rag_fusion_chain import ingest, models
from rag_fusion_chain.retrievers.bm25 import BM25Retriever
from rag_fusion_chain.retrievers.index_directory import (
    BM25_DIRECTORY,
    INDEX_FILE,
    build_index,
    open_index,
    read_settings,
    stores_directory,
)
from rag_fusion_chain.retrievers.signing import UntrustedIndexError

TOPICS = ["heat pumps", "solar panels", "wind turbines", "tidal power", "geothermal wells"]
SMALL: dict[str, Any] = {"chunk_size": 24, "chunk_overlap": 4}
QUERIES = ["heat pumps in winter", "solar cells", "offshore wind", "tides", "drilling", "batteries"]


def text(topic: str, version: int = 0) -> str:
    sentences = [
        f"Part {part} (v{version}) of the notes on {topic}: {topic} item {part}."
        for part in range(12)
    ]
    return f"# {topic.title()}\n\n" + "\n\n".join(sentences)


class CountingEmbeddings(DeterministicFakeEmbedding):
    """A deterministic fake that keeps every text it embeds as a document."""

    embedded: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded.extend(texts)
        return super().embed_documents(texts)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    directory = tmp_path / "notes"
    directory.mkdir()
    for topic in TOPICS:
        (directory / f"{topic.split()[0]}.md").write_text(text(topic), "utf-8")
    return directory


def change_add_delete(folder: Path) -> None:
    (folder / "solar.md").write_text(text("solar panels", version=1), "utf-8")
    (folder / "batteries.md").write_text(text("batteries"), "utf-8")
    (folder / "wind.md").unlink()


def chunks_of(out: Path) -> list[tuple[str | None, str, dict[str, object]]]:
    documents = BM25Retriever.load(stores_directory(out, read_settings(out)) / BM25_DIRECTORY)
    return [(chunk.id, chunk.page_content, chunk.metadata) for chunk in documents.documents]


def search(out: Path, embeddings: CountingEmbeddings, query: str) -> list[tuple[str, float]]:
    (vectors,) = open_index(out, embeddings).retrievers(hybrid=False, k=100)
    return [(str(found.id), found.metadata["score"]) for found in vectors.invoke(query)]


@pytest.mark.parametrize("store", ["faiss", "chroma"])
def test_an_update_embeds_only_changed_sources_and_equals_a_full_rebuild(
    store: str, folder: Path, tmp_path: Path
) -> None:
    embeddings = CountingEmbeddings(size=32, embedded=[])
    options = {"store": store, "embedding": embeddings, **SMALL}
    first = build_index([folder], tmp_path / "index", **options)
    assert first["embedded_chunks"] == first["chunks"] == len(embeddings.embedded)
    change_add_delete(folder)
    embeddings.embedded.clear()

    updated = build_index([folder], tmp_path / "index", update=True, **options)

    topics = {
        passage.split(" of the notes on ")[1].split(":")[0] for passage in embeddings.embedded
    }
    assert topics == {"solar panels", "batteries"}
    assert not any("heat" in passage or "wind" in passage for passage in embeddings.embedded)
    assert updated["embedded_chunks"] == len(embeddings.embedded) < updated["chunks"]
    index, full_out = tmp_path / "index", tmp_path / "full"
    full = build_index([folder], full_out, **options)
    ignored = ("version", "signature", "embedded_chunks", "dropped_sources", "read_at_ns")
    assert {key: value for key, value in updated.items() if key not in ignored} == {
        key: value for key, value in full.items() if key not in ignored
    }
    assert chunks_of(tmp_path / "index") == chunks_of(tmp_path / "full")
    stores = stores_directory(index, updated)  # the texts written once, FAISS's a link to BM25's
    assert store != "faiss" or os.path.samefile(
        stores / "faiss" / "docstore.json", stores / BM25_DIRECTORY / "documents.json"
    )
    assert not any(source.startswith("notes/wind") for source in updated["source_hashes"])
    for query in QUERIES:
        updated_found, full_found = (search(out, embeddings, query) for out in (index, full_out))
        assert [found[0] for found in updated_found] == [found[0] for found in full_found]
        assert [found[1] for found in updated_found] == pytest.approx(
            [found[1] for found in full_found], abs=1e-6
        )


@pytest.mark.parametrize("store", ["faiss", "chroma"])
def test_an_update_of_an_unchanged_folder_embeds_nothing(
    store: str, folder: Path, tmp_path: Path
) -> None:
    embeddings = CountingEmbeddings(size=16, embedded=[])
    options = {"store": store, "embedding": embeddings, **SMALL}
    first = build_index([folder], tmp_path / "index", **options)
    embeddings.embedded.clear()
    again = build_index([folder], tmp_path / "index", update=True, **options)
    assert embeddings.embedded == [] and again["embedded_chunks"] == 0
    assert again["chunks"] == first["chunks"] and again["version"] != first["version"]
    assert search(tmp_path / "index", embeddings, "solar") != []


def test_an_update_copies_links_in_the_previous_chroma_folder_as_links(
    folder: Path, tmp_path: Path
) -> None:
    # the copy of the previous collection followed links: one planted to a file elsewhere put its
    # text in the index folder, one to a folder copied that folder, one to /dev/zero never ended
    embeddings = CountingEmbeddings(size=16, embedded=[])
    options = {"store": "chroma", "embedding": embeddings, **SMALL}
    first = build_index([folder], tmp_path / "index", **options)
    secret = tmp_path / "secret.txt"
    secret.write_text("canary", "utf-8")
    (stores_directory(tmp_path / "index", first) / "chroma" / "planted").symlink_to(secret)
    again = build_index([folder], tmp_path / "index", update=True, **options)
    copied = stores_directory(tmp_path / "index", again) / "chroma" / "planted"
    assert copied.is_symlink() and os.readlink(copied) == str(secret)
    assert search(tmp_path / "index", embeddings, "solar") != []


def test_an_update_without_an_index_builds_one(folder: Path, tmp_path: Path) -> None:
    embeddings = CountingEmbeddings(size=16, embedded=[])
    settings = build_index([folder], tmp_path / "new", embedding=embeddings, update=True)
    assert settings["embedded_chunks"] == settings["chunks"] == len(embeddings.embedded) > 0


@pytest.mark.parametrize(
    ("changed", "value"), [("chunk_size", 32), ("faiss_index", "hnsw"), ("store", "chroma")]
)
def test_an_update_needs_the_settings_the_index_was_built_with(
    changed: str, value: object, folder: Path, tmp_path: Path
) -> None:
    embeddings = CountingEmbeddings(size=16, embedded=[])
    options = {"embedding": embeddings, **SMALL, changed: value}
    build_index([folder], tmp_path / "index", embedding=embeddings, **SMALL)
    with pytest.raises(ValueError, match=f"{changed}: .* pass force=True"):
        build_index([folder], tmp_path / "index", update=True, **options)
    with pytest.raises(ValueError, match="faiss_index: 'hnsw' needs store='faiss'"):
        build_index([folder], tmp_path / "other", store="chroma", faiss_index="hnsw")


@pytest.mark.parametrize("store", ["faiss", "chroma"])
def test_an_update_keeps_the_recorded_settings_when_none_are_given(
    store: str, folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    embeddings = CountingEmbeddings(size=16, embedded=[])
    named: list[str] = []
    monkeypatch.setattr(models, "embeddings", lambda name, **_: named.append(name) or embeddings)
    out = tmp_path / "index"
    faiss_index = "hnsw" if store == "faiss" else None
    first = build_index(
        [folder], out, store=store, faiss_index=faiss_index, embedding="fake-name", **SMALL
    )
    change_add_delete(folder)
    named.clear()
    updated = build_index([folder], out, update=True)
    assert named == ["fake-name"]  # the recorded name, not $RAG_FUSION_EMBEDDING or the default
    kept = (
        "store",
        "faiss_index",
        "embedding",
        "embedding_identity",
        "chunk_size",
        "chunk_overlap",
    )
    assert {key: updated[key] for key in kept} == {key: first[key] for key in kept}
    assert updated["chunk_size"] == SMALL["chunk_size"]
    assert 0 < updated["embedded_chunks"] < updated["chunks"]
    full = build_index(
        [folder],
        tmp_path / "full",
        store=store,
        faiss_index=faiss_index,
        embedding="fake-name",
        **SMALL,
    )
    assert chunks_of(out) == chunks_of(tmp_path / "full") and full["chunks"] == updated["chunks"]


def test_an_update_of_an_index_built_from_an_embeddings_object_needs_it_again(
    folder: Path, tmp_path: Path
) -> None:
    build_index([folder], tmp_path / "index", embedding=CountingEmbeddings(size=16), **SMALL)
    with pytest.raises(ValueError, match="embedding: .* given as an object .* pass the same"):
        build_index([folder], tmp_path / "index", update=True)
    other = DeterministicFakeEmbedding(size=8)
    with pytest.raises(ValueError, match="embedding_identity: .* leave it out .* force=True"):
        build_index([folder], tmp_path / "index", update=True, embedding=other)


def test_an_update_refuses_a_previous_store_it_cannot_verify(folder: Path, tmp_path: Path) -> None:
    embeddings = CountingEmbeddings(size=16, embedded=[])
    out = tmp_path / "index"
    settings = build_index([folder], out, embedding=embeddings, **SMALL)
    (folder / "solar.md").write_text(text("solar panels", version=1), "utf-8")
    with (stores_directory(out, settings) / "faiss" / "index.faiss").open("ab") as handle:
        handle.write(b"\0")
    with pytest.raises(UntrustedIndexError):
        build_index([folder], out, embedding=embeddings, **SMALL, update=True)
    assert read_settings(out) == settings


def test_an_update_never_signs_texts_changed_in_the_unsigned_bm25_folder(
    folder: Path, tmp_path: Path
) -> None:
    # the kept chunks came from bm25/documents.json: an edit there became the new signed docstore
    embeddings = CountingEmbeddings(size=16, embedded=[])
    out = tmp_path / "index"
    settings = build_index([folder], out, embedding=embeddings, **SMALL)
    documents = stores_directory(out, settings) / BM25_DIRECTORY / "documents.json"
    planted = documents.read_text("utf-8").replace("wind turbines item", "PLANTED item")
    documents.unlink()  # a file of its own, no longer FAISS's docstore.json
    documents.write_text(planted, "utf-8")
    (folder / "solar.md").write_text(text("solar panels", version=1), "utf-8")
    with pytest.raises(UntrustedIndexError, match="bm25: not the signed FAISS texts"):
        build_index([folder], out, embedding=embeddings, **SMALL, update=True)
    assert read_settings(out) == settings


def test_a_faiss_index_type_is_built_recorded_and_kept_by_an_update(
    folder: Path, tmp_path: Path
) -> None:
    import faiss

    embeddings = CountingEmbeddings(size=16, embedded=[])
    out = tmp_path / "index"
    options = {"embedding": embeddings, **SMALL, "faiss_index": "hnsw"}
    assert build_index([folder], out, **options)["faiss_index"] == "hnsw"
    change_add_delete(folder)
    updated = build_index([folder], out, update=True, **options)
    assert read_settings(out)["faiss_index"] == updated["faiss_index"] == "hnsw"
    store = open_index(out, embeddings).vectors.vectorstore
    assert isinstance(faiss.downcast_index(store.index), faiss.IndexHNSWFlat)
    assert store.index.ntotal == updated["chunks"]
    flat = build_index([folder], tmp_path / "flat", embedding=embeddings, **SMALL)
    assert flat["faiss_index"] == "flat"
    assert isinstance(
        faiss.downcast_index(open_index(tmp_path / "flat", embeddings).vectors.vectorstore.index),
        faiss.IndexFlat,
    )


@pytest.mark.parametrize("faiss_index", ["hsnw", "IVF8,PQ5"])
def test_a_faiss_index_type_faiss_cannot_make_fails_before_anything_is_embedded(
    faiss_index: str, folder: Path, tmp_path: Path
) -> None:
    embeddings = CountingEmbeddings(size=16, embedded=[])
    with pytest.raises(ValueError, match=f"faiss_index: FAISS cannot make '{faiss_index}'"):
        build_index([folder], tmp_path / "index", embedding=embeddings, faiss_index=faiss_index)
    assert embeddings.embedded == [] and not (tmp_path / "index").exists()


def test_the_index_command_updates_and_takes_a_faiss_index_type(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from rag_fusion_chain.cli import app

    embeddings = CountingEmbeddings(size=16, embedded=[])
    monkeypatch.setattr(models, "embeddings", lambda name, **_: embeddings)
    out = tmp_path / "index"
    runner = CliRunner()
    built = runner.invoke(app, ["index", str(folder), "--out", str(out), "--faiss-index", "hnsw"])
    assert built.exit_code == 0, built.output
    assert read_settings(out)["faiss_index"] == "hnsw"
    again = runner.invoke(app, ["index", str(folder), "--out", str(out)])
    assert again.exit_code != 0 and "--update" in again.output and "--force" in again.output
    change_add_delete(folder)
    embeddings.embedded.clear()
    updated = runner.invoke(
        app, ["index", str(folder), "--out", str(out), "--update", "--faiss-index", "hnsw"]
    )
    assert updated.exit_code == 0, updated.output
    summary = " ".join(updated.stdout.split())  # wind.md deleted: its source counted as dropped
    assert (
        f"embedded {len(embeddings.embedded)} chunks, dropped 1 source" in summary
    )  # not "1 sources"
    assert 0 < len(embeddings.embedded) < read_settings(out)["chunks"]
    kept = runner.invoke(app, ["index", str(folder), "--out", str(out), "--update"])
    assert kept.exit_code == 0, kept.output
    assert "embedded 0 chunks, dropped 0 sources" in " ".join(kept.stdout.split())
    assert read_settings(out)["faiss_index"] == "hnsw"  # the recorded one, not the default
    wrong = runner.invoke(
        app, ["index", str(folder), "--out", str(out), "--update", "--faiss-index", "flat"]
    )
    assert wrong.exit_code != 0 and "faiss_index" in wrong.output and "--force" in wrong.output
    (folder / "heat.md").unlink()
    (folder / "tidal.md").unlink()
    dropped = runner.invoke(app, ["index", str(folder), "--out", str(out), "--update"])
    assert "embedded 0 chunks, dropped 2 sources" in " ".join(dropped.stdout.split())
    assert sorted(read_settings(out)["source_hashes"]) == [
        "notes/batteries.md",
        "notes/geothermal.md",
        "notes/solar.md",
    ]


def test_an_index_from_before_updates_embeds_everything_once(folder: Path, tmp_path: Path) -> None:
    """An index without source hashes (built before updates existed) is re-embedded whole."""
    from rag_fusion_chain.retrievers.signing import sign

    embeddings = CountingEmbeddings(size=16, embedded=[])
    out = tmp_path / "index"
    settings = build_index([folder], out, embedding=embeddings, **SMALL)
    old = {
        key: value for key, value in settings.items() if key not in ("source_hashes", "signature")
    }
    (out / INDEX_FILE).write_text(json.dumps(sign(old)), "utf-8")
    embeddings.embedded.clear()
    updated = build_index([folder], out, embedding=embeddings, **SMALL, update=True)
    assert updated["embedded_chunks"] == updated["chunks"] == len(embeddings.embedded)


def age(folder: Path, seconds: int = 3600) -> None:
    """Date the files of ``folder`` back, as those of a folder last edited long before a build."""
    past = time.time_ns() - seconds * 1_000_000_000
    for path in folder.iterdir():
        os.utime(path, ns=(past, past))


def test_an_update_reads_only_the_files_whose_stat_changed(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    age(folder)
    embeddings = CountingEmbeddings(size=16, embedded=[])
    out = tmp_path / "index"
    build_index([folder], out, embedding=embeddings, **SMALL)
    (folder / "heat.md").touch()  # a new mtime, the same content
    change_add_delete(folder)  # solar.md edited, batteries.md added, wind.md deleted
    read: list[str] = []
    load_file = ingest.load_file
    monkeypatch.setattr(
        ingest,
        "load_file",
        lambda path, **options: read.append(path.name) or load_file(path, **options),
    )
    embeddings.embedded.clear()
    updated = build_index([folder], out, update=True, embedding=embeddings, **SMALL)
    assert sorted(read) == ["batteries.md", "heat.md", "solar.md"]
    topics = {
        passage.split(" of the notes on ")[1].split(":")[0] for passage in embeddings.embedded
    }
    assert topics == {"solar panels", "batteries"}  # heat.md was read, its chunks kept
    full = build_index([folder], tmp_path / "full", embedding=embeddings, **SMALL)
    assert chunks_of(out) == chunks_of(tmp_path / "full")
    ignored = ("version", "signature", "embedded_chunks", "dropped_sources", "read_at_ns")
    assert {key: value for key, value in updated.items() if key not in ignored} == {
        key: value for key, value in full.items() if key not in ignored
    }
    assert "notes/wind.md" not in updated["source_files"] and updated["files"] == len(TOPICS)


@pytest.mark.parametrize(("stamped_before", "seen"), [(0, True), (60, False)])
def test_an_edit_that_keeps_the_stat_is_seen_if_stamped_in_the_tick_of_the_last_build(
    stamped_before: int, seen: bool, folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Coarse file times (FAT: 2 s) can let an edit right after a build keep the file's stat: a file
    stamped within that granularity of the previous build's reading is read again ("racily clean");
    an older stamp is trusted."""
    tick = time.time_ns() - stamped_before * 1_000_000_000
    monkeypatch.setattr(
        ingest, "_file_stamp", lambda status: (status.st_size, tick, tick, status.st_ino)
    )
    embeddings = CountingEmbeddings(size=16, embedded=[])
    out = tmp_path / "index"
    build_index([folder], out, embedding=embeddings, **SMALL)
    (folder / "solar.md").write_text(text("solar panels", version=2), "utf-8")  # the same size
    build_index([folder], out, update=True, embedding=embeddings, **SMALL)
    assert any("(v2)" in chunk[1] for chunk in chunks_of(out)) is seen
