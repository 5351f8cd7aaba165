"""Index directories: build and open (FAISS and Chroma), atomic builds, force, errors, trust."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings

from rag_fusion_chain import models, retrievers
from rag_fusion_chain.retrievers.bm25 import BM25Retriever
from rag_fusion_chain.retrievers.index_directory import (
    BM25_DIRECTORY,
    INDEX_FILE,
    INDEX_FORMAT,
    VERSIONS_DIRECTORY,
    OpenedIndex,
    build_index,
    open_index,
    read_settings,
    stores_directory,
)
from rag_fusion_chain.retrievers.signing import UntrustedIndexError
from rag_fusion_chain.retrievers.stores import VectorRetriever
from tests.stub_openai import StubOpenAI

FILES = {
    "heat.md": "# Heat pumps\n\nHeat pumps move heat with a compressor and a refrigerant. "
    "In winter the refrigerant absorbs heat from the outside air.\n\n"
    "Ground source heat pumps use boreholes instead of air.\n\n"
    "A heat pump delivers three to four units of heat for each unit of electricity it uses.",
    "solar.txt": "Solar panels turn sunlight into electricity with photovoltaic silicon cells.",
    "wind.txt": "Wind turbines turn wind into electricity. Offshore wind farms are large.",
}
QUESTION = "How do heat pumps work in winter?"


@pytest.fixture
def corpus(tmp_path: Path) -> list[Path]:
    directory = tmp_path / "corpus"
    directory.mkdir()
    for name, text in FILES.items():
        (directory / name).write_text(text, "utf-8")
    return [directory / name for name in FILES]


@pytest.fixture
def embeddings() -> Embeddings:
    return DeterministicFakeEmbedding(size=32)


class Progress:
    """Records ``on_progress`` calls: the stages in order and how far each went."""

    def __init__(self) -> None:
        self.stages: list[str] = []
        self.done: dict[str, int] = defaultdict(int)
        self.totals: dict[str, int] = {}

    def __call__(self, stage: str, advance: int, total: int) -> None:
        if stage not in self.stages:
            assert advance == 0, "a stage is announced before it advances"
            self.stages.append(stage)
        self.done[stage] += advance
        self.totals[stage] = total


class FailingEmbeddings(Embeddings):
    """Embeds the first batch, then fails: an interrupted build."""

    def __init__(self) -> None:
        self.inner = DeterministicFakeEmbedding(size=32)
        self.calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls > 1:
            raise ConnectionError("the embedding server went away")
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


class ArrayOnlyEmbeddings(Embeddings):
    """Hands vectors over as numpy rows only (as the kit's own embedders do): a detour through
    lists of floats, 24+ bytes a number instead of 4, fails."""

    def __init__(self) -> None:
        self.inner = DeterministicFakeEmbedding(size=32)
        self.rows = 0

    def embed_documents_array(self, texts: list[str]) -> Any:
        import numpy as np

        self.rows += len(texts)
        return np.asarray(self.inner.embed_documents(list(texts)), dtype=np.float32)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("the vectors went through a list of floats")

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def many_documents(count: int) -> list[Document]:
    return [
        Document(
            f"document number {number} about energy",
            id=f"d{number}",
            metadata={"source": f"d{number}.txt"},
        )
        for number in range(count)
    ]


def leftovers(parent: Path, out: Path) -> list[str]:
    """Entries of ``parent`` other than ``out`` and the corpus: staging directories left behind."""
    return sorted(path.name for path in parent.iterdir() if path not in (out, parent / "corpus"))


# --------------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["faiss", "chroma"])
def test_build_and_open_round_trip(
    store: str, corpus: list[Path], tmp_path: Path, embeddings: Embeddings
) -> None:
    out = tmp_path / "index"
    progress = Progress()
    settings = build_index(
        corpus,
        out,
        store=store,
        embedding=embeddings,
        chunk_size=40,
        chunk_overlap=5,
        on_progress=progress,
    )
    assert settings["format"] == INDEX_FORMAT and settings["store"] == store
    assert settings["documents"] == len(FILES) and settings["chunks"] > len(FILES)
    assert settings["sources"] == [str(path) for path in corpus]
    assert settings["embedding"] is None  # given as an object
    assert settings["embedding_identity"].endswith("DeterministicFakeEmbedding(size=32)")
    assert settings["embedding_precision"] is None  # a fake model says nothing of its precision
    assert json.loads((out / INDEX_FILE).read_text("utf-8")) == settings
    assert sorted(path.name for path in out.iterdir()) == [VERSIONS_DIRECTORY, INDEX_FILE]
    assert sorted(path.name for path in stores_directory(out, settings).iterdir()) == sorted(
        [BM25_DIRECTORY, store]
    )
    assert progress.stages == ["load", "bm25", "embed"]  # the stores take BM25's identified chunks
    assert (
        dict(progress.done)
        == progress.totals
        == {
            "load": len(FILES),
            "embed": settings["chunks"],
            "bm25": 1,
        }
    )
    assert leftovers(tmp_path, out) == []

    opened = open_index(out, embeddings)
    assert isinstance(opened, OpenedIndex) and opened.settings == settings
    assert isinstance(opened.vectors, VectorRetriever) and isinstance(opened.bm25, BM25Retriever)
    (vectors,) = opened.retrievers(hybrid=False, k=3)
    found = vectors.invoke(QUESTION)
    assert len(found) == 3 and all("score" in document.metadata for document in found)
    assert all(document.id and "#" in document.id for document in found)  # chunk ids
    assert opened.bm25.invoke(QUESTION)[0].id.startswith(corpus[0].name)
    (hybrid,) = opened.retrievers(hybrid=True, k=2)
    assert 1 <= len(hybrid.invoke(QUESTION)) <= 4


def test_a_faiss_index_takes_the_embedders_numpy_rows(corpus: list[Path], tmp_path: Path) -> None:
    embeddings = ArrayOnlyEmbeddings()
    settings = build_index(
        corpus, tmp_path / "index", embedding=embeddings, chunk_size=40, chunk_overlap=5
    )
    assert embeddings.rows == settings["chunks"]
    (vectors,) = open_index(tmp_path / "index", embeddings).retrievers(hybrid=False, k=2)
    assert len(vectors.invoke(QUESTION)) == 2


def test_faiss_and_bm25_share_one_texts_file_parsed_once(
    tmp_path: Path, embeddings: Embeddings
) -> None:
    import os

    from rag_fusion_chain.retrievers.faiss_files import docstore_columns

    out = tmp_path / "index"
    stores = stores_directory(out, build_index(many_documents(3), out, embedding=embeddings))
    documents = stores / BM25_DIRECTORY / "documents.json"
    assert os.path.samefile(stores / "faiss" / "docstore.json", documents)  # written once
    opened = open_index(out, embeddings)
    assert opened.bm25.documents is docstore_columns(opened.vectors.vectorstore)  # parsed once
    copy = tmp_path / "copy"  # copied file by file: two files of the same bytes, still shared
    shutil.copytree(out, copy)
    opened = open_index(copy, embeddings)
    assert opened.bm25.documents is docstore_columns(opened.vectors.vectorstore)
    copied = copy / documents.relative_to(out)
    copied.write_bytes(copied.read_bytes().replace(b"energy", b"changed"))
    opened = open_index(copy, embeddings)
    assert opened.bm25.documents is not docstore_columns(opened.vectors.vectorstore)
    assert "changed" in opened.bm25.documents[0].page_content  # its own file, read
    verified = opened.vectors.vectorstore.docstore.search(opened.bm25.documents[0].id)
    assert "energy" in verified.page_content  # FAISS's own, verified


def test_documents_are_indexed_whole_with_chunk_size_none(
    tmp_path: Path, embeddings: Embeddings
) -> None:
    documents = many_documents(5)
    settings = build_index(documents, tmp_path / "index", embedding=embeddings, chunk_size=None)
    assert settings["sources"] == [] and settings["documents"] == settings["chunks"] == 5
    opened = open_index(tmp_path / "index", embeddings)
    found = opened.retrievers(hybrid=False, k=5)[0].invoke("document number 3")
    assert sorted(document.id for document in found) == [f"d{number}" for number in range(5)]


@pytest.mark.parametrize(("size", "overlap"), [(40, None), (10, 20), (10, 10)])
def test_an_overlap_not_below_the_chunk_size_is_refused_before_loading(
    tmp_path: Path, embeddings: Embeddings, size: int, overlap: int | None
) -> None:
    missing = tmp_path / "no-such-folder"  # never read: the settings are checked first
    with pytest.raises(ValueError, match=r"chunk_overlap \(\d+\) must be smaller than chunk_size"):
        build_index(
            [missing],
            tmp_path / "index",
            embedding=embeddings,
            chunk_size=size,
            chunk_overlap=overlap,
        )
    assert not (tmp_path / "index").exists()


def test_the_embedding_name_is_recorded_and_resolved_again(
    corpus: list[Path],
    tmp_path: Path,
    clean_model_env: pytest.MonkeyPatch,
    clean_openai_stub: StubOpenAI,
) -> None:
    clean_model_env.setenv("OPENAI_BASE_URL", clean_openai_stub.base_url)  # loopback: no key
    settings = build_index(corpus, tmp_path / "named", embedding="openai:stub-embedding")
    assert settings["embedding"] == "openai:stub-embedding"
    opened = open_index(tmp_path / "named")
    assert opened.retrievers(hybrid=False, k=2)[0].invoke(QUESTION)

    build_index(corpus, tmp_path / "object", embedding=DeterministicFakeEmbedding(size=32))
    with pytest.raises(ValueError, match="pass the same embeddings"):
        open_index(tmp_path / "object")


def test_an_embeddings_object_can_be_recorded_by_the_name_that_makes_it(
    corpus: list[Path],
    tmp_path: Path,
    clean_model_env: pytest.MonkeyPatch,
    clean_openai_stub: StubOpenAI,
) -> None:
    # `rag-fusion demo --index` builds from MiniLM with the sample's shipped vectors: an object,
    # recorded as "minilm" so that `ask --index` reopens it by name
    clean_model_env.setenv("OPENAI_BASE_URL", clean_openai_stub.base_url)
    name = "openai:stub-embedding"
    settings = build_index(
        corpus, tmp_path / "named", embedding=models.embeddings(name), embedding_name=name
    )
    assert settings["embedding"] == name
    assert open_index(tmp_path / "named").retrievers(hybrid=False, k=2)[0].invoke(QUESTION)
    with pytest.raises(ValueError, match="embedding_name: 'openai:stub-embedding' makes"):
        build_index(
            corpus,
            tmp_path / "other",
            embedding=DeterministicFakeEmbedding(size=32),
            embedding_name=name,
        )
    with pytest.raises(TypeError, match="embedding_name goes with an Embeddings object"):
        build_index(corpus, tmp_path / "str", embedding=name, embedding_name=name)
    assert not (tmp_path / "other").exists() and not (tmp_path / "str").exists()


def test_names_are_exported_lazily_by_the_package() -> None:
    assert retrievers.build_index is build_index and retrievers.open_index is open_index
    assert retrievers.OpenedIndex is OpenedIndex
    assert all(getattr(retrievers, name) for name in retrievers.__all__)  # each one resolves


# --------------------------------------------------------------------------------------------
# Atomic builds and force
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["faiss", "chroma"])
def test_a_failed_build_leaves_no_index(store: str, tmp_path: Path) -> None:
    out = tmp_path / "index"
    with pytest.raises(ConnectionError, match="went away"):
        build_index(many_documents(100), out, store=store, embedding=FailingEmbeddings())
    assert not out.exists()
    assert leftovers(tmp_path, out) == []


def test_a_failed_rebuild_keeps_the_previous_index(tmp_path: Path, embeddings: Embeddings) -> None:
    out = tmp_path / "index"
    before = build_index(many_documents(3), out, embedding=embeddings)
    with pytest.raises(ConnectionError):
        build_index(many_documents(100), out, embedding=FailingEmbeddings(), force=True)
    assert read_settings(out) == before
    assert open_index(out, embeddings).vectors.vectorstore.index.ntotal == 3
    assert leftovers(tmp_path, out) == []


def test_an_existing_index_needs_force(tmp_path: Path, embeddings: Embeddings) -> None:
    out = tmp_path / "index"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file")
    first = build_index(many_documents(3), out, embedding=embeddings)
    with pytest.raises(FileExistsError, match="force=True"):
        build_index(many_documents(4), out, embedding=embeddings)
    assert read_settings(out)["documents"] == 3

    settings = build_index(many_documents(4), out, store="chroma", embedding=embeddings, force=True)
    assert read_settings(out) == settings and settings["documents"] == 4
    assert sorted(path.name for path in out.iterdir()) == [
        VERSIONS_DIRECTORY,
        INDEX_FILE,
        "notes.txt",
    ]
    assert sorted(path.name for path in stores_directory(out, settings).iterdir()) == [
        BM25_DIRECTORY,
        "chroma",
    ]
    # the replaced version stays for readers still loading it, until the next build
    assert stores_directory(out, first).is_dir()
    settings = build_index(many_documents(4), out, store="chroma", embedding=embeddings, force=True)
    assert not stores_directory(out, first).exists()
    assert len(list((out / VERSIONS_DIRECTORY).iterdir())) == 2
    opened = open_index(out, embeddings)
    assert len(opened.retrievers(hybrid=False, k=10)[0].invoke("energy")) == 4
    assert leftovers(tmp_path, out) == []


def test_when_another_build_finishes_first_its_index_is_kept(
    tmp_path: Path, embeddings: Embeddings
) -> None:
    out = tmp_path / "index"

    def competing_build(stage: str, advance: int, total: int) -> None:
        if stage == "bm25" and advance == 0:
            build_index(many_documents(2), out, embedding=embeddings)

    with pytest.raises(FileExistsError):
        build_index(many_documents(5), out, embedding=embeddings, on_progress=competing_build)
    assert read_settings(out)["documents"] == 2
    assert open_index(out, embeddings).vectors.vectorstore.index.ntotal == 2
    assert leftovers(tmp_path, out) == []


# --------------------------------------------------------------------------------------------
# Errors and trust
# --------------------------------------------------------------------------------------------


def test_missing_and_invalid_indexes(tmp_path: Path, embeddings: Embeddings) -> None:
    with pytest.raises(FileNotFoundError, match="no index in .*nowhere.*rag-fusion index"):
        open_index(tmp_path / "nowhere", embeddings)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / INDEX_FILE).write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="not a rag-fusion index"):
        open_index(tmp_path / "other", embeddings)
    (tmp_path / "other" / INDEX_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        open_index(tmp_path / "other", embeddings)
    with pytest.raises(ValueError, match="unknown store 'pinecone'.*faiss"):
        build_index(many_documents(2), tmp_path / "index", store="pinecone")
    with pytest.raises(ValueError, match="no documents"):
        build_index([tmp_path / "other"], tmp_path / "index", embedding=embeddings)
    assert not (tmp_path / "index").exists()


def test_a_tampered_faiss_store_is_refused_unless_trusted(
    tmp_path: Path, embeddings: Embeddings
) -> None:
    out = tmp_path / "index"
    settings = build_index(many_documents(3), out, embedding=embeddings)
    with (stores_directory(out, settings) / "faiss" / "index.faiss").open("ab") as handle:
        handle.write(b"\0")
    with pytest.raises(UntrustedIndexError, match="tampered"):
        open_index(out, embeddings)
    opened: Any = open_index(out, embeddings, trust=True)
    assert opened.vectors.vectorstore.index.ntotal == 3


# --------------------------------------------------------------------------------------------
# A replace killed at every step (issue 22 item 1)
# --------------------------------------------------------------------------------------------

FILE_OPERATIONS = ("mkdir", "rename", "replace", "link", "unlink", "remove", "rmdir")
"""The ``os`` calls that change a folder: a rebuild is killed before each in turn."""


def _rebuild_killed_at(step: int | None, out: Path, counter: Path, update: bool) -> None:
    """In a forked child: rebuild (or update) ``out`` with 5 documents, ``os._exit(9)`` before
    the ``step``-th file operation (never when None), and write the count of operations."""
    import os

    calls = [0]

    def counted(operation: Any) -> Any:
        def wrapper(*arguments: Any, **keywords: Any) -> Any:
            if calls[0] == step:
                os._exit(9)  # SIGKILL's effect: no cleanup, no finally
            calls[0] += 1
            return operation(*arguments, **keywords)

        return wrapper

    for name in FILE_OPERATIONS:
        setattr(os, name, counted(getattr(os, name)))
    embeddings = DeterministicFakeEmbedding(size=32)
    build_index(many_documents(5), out, embedding=embeddings, force=not update, update=update)
    counter.write_text(str(calls[0]))


def _run_child(step: int | None, out: Path, counter: Path, update: bool) -> int | None:
    import multiprocessing

    process = multiprocessing.get_context("fork").Process(
        target=_rebuild_killed_at, args=(step, out, counter, update)
    )
    process.start()
    process.join(60)
    return process.exitcode


def _make_flat(out: Path) -> None:
    """Turn the index in ``out`` into the flat layout of earlier versions of the kit."""
    from rag_fusion_chain.retrievers.signing import sign

    settings = read_settings(out)
    for entry in stores_directory(out, settings).iterdir():
        entry.rename(out / entry.name)
    shutil.rmtree(out / VERSIONS_DIRECTORY)
    flat = sign(
        {key: value for key, value in settings.items() if key not in ("version", "signature")}
    )
    (out / INDEX_FILE).write_text(json.dumps(flat), "utf-8")


@pytest.mark.parametrize("update", [False, True], ids=["rebuild", "update"])
@pytest.mark.parametrize("layout", ["versioned", "flat"])
def test_a_rebuild_killed_at_any_step_leaves_a_loadable_index(
    layout: str, update: bool, tmp_path: Path, embeddings: Embeddings
) -> None:
    good = tmp_path / "good"
    build_index(many_documents(3), good, embedding=embeddings)
    if layout == "flat":
        _make_flat(good)
        assert "version" not in read_settings(good)
    counter = tmp_path / "count"
    assert _run_child(None, shutil.copytree(good, tmp_path / "dry"), counter, update) == 0
    steps = int(counter.read_text())
    assert steps >= 4  # mkdir, link or replace, the removals
    for step in range(steps):
        out = shutil.copytree(good, tmp_path / f"killed-{step}", symlinks=True)
        assert _run_child(step, out, counter, update) == 9, f"step {step} was not reached"
        loaded = open_index(out, embeddings).vectors.vectorstore.index.ntotal
        assert loaded in (3, 5), f"killed before step {step}: {loaded} documents"
        build_index(many_documents(5), out, embedding=embeddings, force=True, update=update)
        assert open_index(out, embeddings).vectors.vectorstore.index.ntotal == 5
        left = {path.name for path in out.iterdir()}
        assert left == {VERSIONS_DIRECTORY, INDEX_FILE}, f"step {step} left {left}"
        assert len(list((out / VERSIONS_DIRECTORY).iterdir())) <= 2, f"step {step}: debris"


def test_the_embedding_precision_is_recorded(corpus: list[Path], tmp_path: Path) -> None:
    """The precision the vectors were computed in (f32, or bf16 on a CPU that has it) is kept in
    the signed settings, so an index says what made its vectors."""
    from langchain_core.embeddings import DeterministicFakeEmbedding

    class HalfPrecision(DeterministicFakeEmbedding):
        embedding_precision: str = "bf16"

    settings = build_index(corpus, tmp_path / "index", embedding=HalfPrecision(size=8))
    assert settings["embedding_precision"] == "bf16"
    assert read_settings(tmp_path / "index")["embedding_precision"] == "bf16"
