"""The ``rag-fusion`` command end to end: index, ask, retrieve, demo, serve, and its errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from rag_fusion_chain import models, strategies
from rag_fusion_chain.cli import app
from rag_fusion_chain.data import SAMPLE_QUESTION, sample_corpus_path, sample_queries
from rag_fusion_chain.offline import OFFLINE_LABEL
from rag_fusion_chain.retrievers.index_directory import INDEX_FILE, read_settings, stores_directory
from rag_fusion_chain.validation import MAX_QUERIES
from tests.conftest import MODEL_ENVIRONMENT_VARIABLES, STUB_API_KEY

QUESTION = "How do heat pumps work in winter?"
FILES = {
    "heat.md": "# Heat pumps\n\nHeat pumps move heat with a compressor and a refrigerant. "
    "In winter the refrigerant absorbs heat from the outside air.\n\n"
    "Ground source heat pumps use boreholes instead of air.\n\n"
    "A heat pump delivers three to four units of heat for each unit of electricity it uses, "
    "which makes it more efficient than a resistive heater or a gas boiler.",
    "solar.txt": "Solar panels turn sunlight into electricity with photovoltaic silicon cells.",
    "wind.txt": "Wind turbines turn wind into electricity. Offshore wind farms are large.",
    "notes/boiler.txt": "Gas boilers burn natural gas to heat water for radiators in winter.",
}

runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def no_model_configuration() -> Iterator[None]:
    """Nothing from the developer's shell configures a model, for the fixtures too."""
    with pytest.MonkeyPatch.context() as patch:
        for name in MODEL_ENVIRONMENT_VARIABLES:
            patch.delenv(name, raising=False)
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield


def invoke(*arguments: Any) -> Any:
    return runner.invoke(app, [str(argument) for argument in arguments])


def assert_one_line_error(result: Any, *phrases: str) -> str:
    """Non-zero exit, no traceback, and exactly one ``error:`` line, the last line of stderr."""
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert lines[-1] == errors[0]
    for phrase in phrases:
        assert phrase in errors[0], errors[0]
    return errors[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("corpus")
    for name, text in FILES.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    return directory


@pytest.fixture(scope="module")
def faiss_index(corpus: Path, tmp_path_factory: pytest.TempPathFactory, minilm: Any) -> Path:
    out = tmp_path_factory.mktemp("indexes") / "faiss-index"
    result = invoke(
        "index",
        corpus,
        "--out",
        out,
        "--store",
        "faiss",
        "--chunk-size",
        "40",
        "--chunk-overlap",
        "5",
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def chroma_index(corpus: Path, tmp_path_factory: pytest.TempPathFactory, minilm: Any) -> Path:
    out = tmp_path_factory.mktemp("indexes") / "chroma-index"
    result = invoke(
        "index", corpus / "heat.md", corpus / "wind.txt", "--out", out, "--store", "chroma"
    )
    assert result.exit_code == 0, result.output
    return out


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cited_numbers(text: str) -> list[int]:
    return [int(number) for number in re.findall(r"\[(\d+)\]$", text, re.MULTILINE)]


# --------------------------------------------------------------------------------------------
# index
# --------------------------------------------------------------------------------------------


def test_index_writes_the_store_the_bm25_index_and_a_description(faiss_index: Path) -> None:
    settings = json.loads((faiss_index / INDEX_FILE).read_text("utf-8"))
    assert settings["store"] == "faiss" and settings["embedding"] == "minilm"
    assert settings["documents"] == len(FILES)
    assert settings["chunks"] > len(FILES)  # 40-token chunks split heat.md
    assert (stores_directory(faiss_index, settings) / "faiss" / "index.faiss").is_file()
    assert (stores_directory(faiss_index, settings) / "bm25" / "documents.json").is_file()


def test_index_with_chroma(chroma_index: Path) -> None:
    settings = json.loads((chroma_index / INDEX_FILE).read_text("utf-8"))
    assert settings["store"] == "chroma" and settings["documents"] == 2
    assert (stores_directory(chroma_index, settings) / "chroma").is_dir()


def test_index_refuses_to_overwrite_without_force(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "index"
    assert invoke("index", corpus / "solar.txt", "--out", out).exit_code == 0
    assert_one_line_error(invoke("index", corpus / "wind.txt", "--out", out), "--force")
    assert invoke("index", corpus / "wind.txt", "--out", out, "--force").exit_code == 0
    assert json.loads((out / INDEX_FILE).read_text("utf-8"))["sources"] == [
        str(corpus / "wind.txt")
    ]


# --------------------------------------------------------------------------------------------
# ask and retrieve, offline
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", strategies.STRATEGIES)
def test_ask_offline_with_every_strategy(faiss_index: Path, strategy: str) -> None:
    result = invoke("ask", QUESTION, "--index", faiss_index, "--strategy", strategy, "--top-n", 3)
    assert result.exit_code == 0, result.output
    stdout = result.stdout
    assert stdout.index("Queries") < stdout.index("Fused sources") < stdout.index(OFFLINE_LABEL)
    rows = re.findall(r"^│ (\d) │", stdout, re.MULTILINE)
    assert rows and len(rows) <= 3
    citations = cited_numbers(stdout)
    assert citations and all(1 <= number <= len(rows) for number in citations)
    assert "heat" in stdout.split(OFFLINE_LABEL)[1].lower()
    assert "no chat model configured" in result.stderr


def test_ask_hybrid_on_chroma(chroma_index: Path) -> None:
    result = invoke("ask", QUESTION, "--index", chroma_index, "--hybrid", "--top-n", 2)
    assert result.exit_code == 0, result.output
    assert OFFLINE_LABEL in result.stdout
    assert cited_numbers(result.stdout)


def test_ask_hybrid_counts_the_lists_it_fused(faiss_index: Path) -> None:
    """3 queries over one hybrid retriever: 3 lists, not the hybrid's inner BM25 and vector lists
    (the caption said 15 for 5 queries), and not the offline query step's own BM25 search."""
    result = invoke("ask", QUESTION, "--index", faiss_index, "--hybrid", "-n", 2, "-v")
    assert result.exit_code == 0, result.output
    assert "over the 3 ranked lists" in " ".join(result.stdout.split())
    found_by = cells_of_column(result.stdout, 5)
    assert re.search(r"q1 hybrid #1 0\.\d+", found_by), found_by
    assert "BM25Retriever" not in found_by and "VectorRetriever" not in found_by


def test_retrieve_json_lists_queries_and_scored_documents(faiss_index: Path) -> None:
    result = invoke("retrieve", QUESTION, "--index", faiss_index, "--json", "--hybrid", "-n", 2)
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["question"] == QUESTION and record["strategy"] == "rag-fusion"
    assert record["queries"][0] == QUESTION and len(record["queries"]) == 3
    documents_file = stores_directory(faiss_index, read_settings(faiss_index)) / "bm25"
    chunk_ids = set(json.loads((documents_file / "documents.json").read_text("utf-8"))["ids"])
    documents = record["documents"]
    assert 1 <= len(documents) <= 5
    assert [document["rank"] for document in documents] == list(range(1, len(documents) + 1))
    fusion_scores = [document["fusion_score"] for document in documents]
    assert fusion_scores == sorted(fusion_scores, reverse=True)
    for document in documents:
        assert document["id"] in chunk_ids
        assert isinstance(document["score"], float)
        assert document["hits"], document
        assert {hit["query"] for hit in document["hits"]} <= set(record["queries"])
        assert {hit["retriever"] for hit in document["hits"]} == {"hybrid"}
    assert "heat.md" in documents[0]["id"]
    assert record["failures"] == []


def test_top_n_left_unset_is_the_strategys_own(corpus: Path, tmp_path: Path) -> None:
    """As in Python and ``demo``: 5 fused documents, multi-query's whole union (it kept 5)."""
    index = tmp_path / "index"
    built = invoke("index", corpus, "--out", index, "--chunk-size", 20, "--chunk-overlap", 0)
    assert read_settings(index)["chunks"] > strategies.DEFAULT_TOP_N, built.output

    def kept(strategy: str) -> int:
        result = invoke("retrieve", QUESTION, "-i", index, "--json", "--hybrid", "-s", strategy)
        assert result.exit_code == 0, result.output
        return len(json.loads(result.stdout)["documents"])

    assert kept("rag-fusion") == strategies.DEFAULT_TOP_N < kept("multi-query")


def test_retrieve_prints_a_table(faiss_index: Path) -> None:
    result = invoke("retrieve", QUESTION, "--index", faiss_index, "--strategy", "hyde")
    assert result.exit_code == 0, result.output
    assert "Fused sources" in result.stdout and OFFLINE_LABEL not in result.stdout


# --------------------------------------------------------------------------------------------
# demo
# --------------------------------------------------------------------------------------------


def test_demo_indexes_the_sample_and_answers_offline(tmp_path: Path, minilm: Any) -> None:
    started = time.monotonic()
    result = invoke("demo", "--index", tmp_path / "demo")
    assert result.exit_code == 0, result.output
    assert SAMPLE_QUESTION in result.stdout
    assert OFFLINE_LABEL in result.stdout
    assert cited_numbers(result.stdout)
    relevant = next(query for query in sample_queries() if query["_id"] == "179")["relevant"]
    titles = {
        record["_id"]: record["title"]
        for record in map(json.loads, sample_corpus_path().read_text("utf-8").splitlines())
    }
    shown = cells_of_column(result.stdout, 2)
    assert any(titles[document_id][:40] in shown for document_id in relevant), shown
    record = json.loads((tmp_path / "demo" / INDEX_FILE).read_text("utf-8"))
    assert record["documents"] == 300
    assert record["embedding"] == "minilm"  # so `ask --index` needs no --embedding
    first_run = time.monotonic() - started
    asked = invoke("ask", SAMPLE_QUESTION, "--index", tmp_path / "demo", "--model", "offline")
    assert asked.exit_code == 0, asked.output
    again = invoke("demo", "--index", tmp_path / "demo")  # reuses the index
    assert again.exit_code == 0 and "Indexing" not in again.stdout
    print(f"demo: {first_run:.1f} s with indexing")


def test_demo_indexes_again_rather_than_load_an_unverifiable_index(
    tmp_path: Path, minilm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own index only (the sample's, from the shipped vectors: a second or two)."""
    from rag_fusion_chain import cli

    builds: list[Path] = []
    build = cli._build_index

    def counted_build(sources: Any, out: Path, **options: Any) -> Any:
        builds.append(out)
        return build(sources, out, **options)

    monkeypatch.setattr(cli, "_build_index", counted_build)
    (tmp_path / "demo").mkdir()  # an empty folder is the demo's to use
    assert invoke("demo", "--index", tmp_path / "demo").exit_code == 0
    assert len(builds) == 1
    demo = stores_directory(tmp_path / "demo", read_settings(tmp_path / "demo"))
    with (demo / "faiss" / "index.faiss").open("ab") as handle:
        handle.write(b"\0")
    result = invoke("demo", "--index", tmp_path / "demo")
    assert result.exit_code == 0, result.output
    assert (
        "cannot verify the demo index" in result.stderr
        and "rebuilding" in result.stderr
        and "Indexing" in result.stdout
    )
    assert len(builds) == 2 and OFFLINE_LABEL in result.stdout


def folder_state(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (hidden ones too) with its bytes."""
    return {str(path): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()}


def test_demo_writes_only_into_a_new_or_empty_folder_or_its_own_index(
    faiss_index: Path, corpus: Path, tmp_path: Path, no_model_loads: list[str]
) -> None:
    """``demo --index DIR`` rebuilt an index it could not verify with ``force=True`` (the user's,
    from another machine or kit version, was destroyed), and wrote ``index.json`` and
    ``.versions/`` into any folder, such as the user's source folder."""
    documents = shutil.copytree(corpus, tmp_path / "docs")
    mine = shutil.copytree(faiss_index, tmp_path / "my-index")
    before = {folder: folder_state(folder) for folder in (documents, mine)}
    for folder, flags in ((documents, ()), (mine, ()), (mine, ("--rebuild",))):
        error = assert_one_line_error(invoke("demo", "--index", folder, *flags), str(folder))
        assert "the demo keeps its own index; give --index a new or empty folder" in error
    with pytest.MonkeyPatch.context() as patch:  # an index the kit cannot verify: another user's
        patch.setenv("RAG_FUSION_INDEX_KEY_FILE", str(tmp_path / "another-users.key"))
        assert_one_line_error(invoke("demo", "--index", mine), "index of other sources")
    assert {folder: folder_state(folder) for folder in (documents, mine)} == before
    assert no_model_loads == []


def test_demo_does_not_answer_over_another_verified_index(faiss_index: Path) -> None:
    """It answered the SciFact sample question over the user's own index, without a word."""
    result = invoke("demo", "--index", faiss_index)
    assert_one_line_error(result, str(faiss_index), "index of other sources")
    assert SAMPLE_QUESTION not in result.stdout


def test_the_sample_corpus_is_small_complete_and_reproducible(tmp_path: Path) -> None:
    corpus_path = sample_corpus_path()
    assert corpus_path.stat().st_size < 1_000_000
    assert (corpus_path.parent / "NOTICE.md").read_text("utf-8").count("CC BY 4.0") == 1
    ids = [json.loads(line)["_id"] for line in corpus_path.read_text("utf-8").splitlines()]
    assert len(ids) == len(set(ids)) == 300
    assert all(set(query["relevant"]) <= set(ids) for query in sample_queries())
    beir = Path("/work/shared/data/scifact")
    if not (beir / "corpus.jsonl").is_file():
        pytest.skip("the BEIR SciFact files are not available here")
    script = Path(__file__).parent.parent / "scripts" / "make_sample_corpus.py"
    subprocess.run(
        [sys.executable, str(script), str(beir), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for name in (corpus_path.name, "scifact_sample_queries.jsonl"):
        assert (tmp_path / name).read_bytes() == (corpus_path.parent / name).read_bytes()


# --------------------------------------------------------------------------------------------
# Errors: one line on stderr, non-zero exit
# --------------------------------------------------------------------------------------------


def test_missing_index(tmp_path: Path) -> None:
    result = invoke("ask", QUESTION, "--index", tmp_path / "nowhere")
    assert_one_line_error(result, "no index in", "rag-fusion index")
    assert_one_line_error(invoke("retrieve", QUESTION, "--index", tmp_path), "no index in")


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    assert_one_line_error(
        invoke("index", tmp_path / "absent.txt", "--out", tmp_path / "index"),
        "no such file or directory",
    )
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00\x81 not text")
    assert_one_line_error(invoke("index", binary, "--out", tmp_path / "index"), "(not UTF-8)")
    assert not (tmp_path / "index" / INDEX_FILE).exists()


def test_a_tampered_faiss_index_is_refused_without_trust_index(
    faiss_index: Path, tmp_path: Path
) -> None:
    tampered = shutil.copytree(faiss_index, tmp_path / "tampered")
    stores = stores_directory(tampered, read_settings(tampered))
    with (stores / "faiss" / "index.faiss").open("ab") as handle:
        handle.write(b"\0")  # still a valid FAISS file, but not the one the kit signed
    for command in ("ask", "retrieve"):
        error = assert_one_line_error(
            invoke(command, QUESTION, "--index", tampered), "tampered", "--trust-index"
        )
        assert "trust=True" not in error  # the command line's words, not the library's
    result = invoke("ask", QUESTION, "--index", tampered, "--trust-index", "--top-n", 2)
    assert result.exit_code == 0, result.output
    assert OFFLINE_LABEL in result.stdout
    retrieved = invoke("retrieve", QUESTION, "--index", tampered, "--trust-index", "--json")
    assert retrieved.exit_code == 0 and json.loads(retrieved.stdout)["documents"]


def test_an_index_signed_by_another_user_is_refused(
    faiss_index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAG_FUSION_INDEX_KEY_FILE", str(tmp_path / "another-users.key"))
    assert_one_line_error(
        invoke("ask", QUESTION, "--index", faiss_index), "another user", "--trust-index"
    )


def test_unreachable_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/page.html"
    assert_one_line_error(invoke("index", url, "--out", tmp_path / "index"), url)


def test_unknown_store_and_strategy(corpus: Path, faiss_index: Path, tmp_path: Path) -> None:
    assert_one_line_error(
        invoke("index", corpus, "--out", tmp_path / "index", "--store", "pinecone"),
        "unknown store 'pinecone'",
        "faiss",
    )
    for command in ("ask", "retrieve"):
        assert_one_line_error(
            invoke(command, QUESTION, "--index", faiss_index, "--strategy", "telepathy"),
            "strategy must be one of rag-fusion",
            "'telepathy'",
        )
    assert_one_line_error(invoke("demo", "--strategy", "telepathy"), "strategy must be one of")


def test_remote_model_without_its_key(corpus: Path, faiss_index: Path, tmp_path: Path) -> None:
    """The command line has no api_key option (a key there would show in `ps`), only a variable."""
    error = assert_one_line_error(
        invoke("ask", QUESTION, "--index", faiss_index, "--model", "gpt-4o-mini"),
        "needs an API key",
    )
    assert error.endswith("needs an API key: set OPENAI_API_KEY"), error
    assert_one_line_error(
        invoke("retrieve", QUESTION, "--index", faiss_index, "--model", "gpt-4o-mini"),
        "needs an API key",
    )
    assert_one_line_error(
        invoke(
            "index",
            corpus,
            "--out",
            tmp_path / "index",
            "--embedding",
            "openai:text-embedding-3-small",
        ),
        "needs an API key",
    )


def test_a_failing_model_is_one_line_and_the_key_is_never_printed(
    faiss_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-never-print-this-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    result = invoke("ask", QUESTION, "--index", faiss_index, "--model", "stub-chat")
    assert_one_line_error(result, "Connection error")
    assert secret not in result.output


# --------------------------------------------------------------------------------------------
# With a configured chat model (the stub OpenAI server)
# --------------------------------------------------------------------------------------------


def test_ask_with_a_configured_model(faiss_index: Path, openai_env: Any) -> None:
    openai_env.script(
        [
            "heat pump refrigerant cycle\nair source heat pump in cold weather",
            "Heat pumps move heat with a refrigerant [1].",
        ]
    )
    result = invoke("ask", QUESTION, "--index", faiss_index, "-n", 2)
    assert result.exit_code == 0, result.output
    assert f"1. {QUESTION}" in result.stdout  # the ready chains search the question too
    assert "2. heat pump refrigerant cycle" in result.stdout
    assert "3. air source heat pump in cold weather" in result.stdout
    assert result.stdout.rstrip().endswith("Heat pumps move heat with a refrigerant [1].")
    assert OFFLINE_LABEL not in result.output
    assert openai_env.counts["chat"] == 2
    assert openai_env.chat_requests[-1]["stream"] is True
    assert "<passage" in json.dumps(openai_env.chat_requests[-1]["messages"])
    assert STUB_API_KEY not in result.output


# --------------------------------------------------------------------------------------------
# serve
# --------------------------------------------------------------------------------------------


def test_serve_answers_over_http(faiss_index: Path, tmp_path: Path) -> None:
    port = closed_port()
    log = (tmp_path / "serve.log").open("w")
    environment = {
        key: value for key, value in os.environ.items() if key not in MODEL_ENVIRONMENT_VARIABLES
    }
    command = [sys.executable, "-m", "rag_fusion_chain.cli", "serve", "--index", str(faiss_index)]
    server = subprocess.Popen(
        [*command, "--port", str(port), "--strategy", "multi-query"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=environment,
    )
    try:
        base = f"http://127.0.0.1:{port}/multi-query"
        deadline = time.monotonic() + 240
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                response = httpx.post(f"{base}/invoke", json={"input": {"question": QUESTION}})
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.5)
        assert response.status_code == 200, response.text
        assert response.json()["output"].startswith(OFFLINE_LABEL)
        sources = httpx.post(f"{base}/sources/invoke", json={"input": {"question": QUESTION}})
        assert sources.status_code == 200, sources.text
        output = sources.json()["output"]
        assert output["answer"].startswith(OFFLINE_LABEL)
        assert output["queries"][0] == QUESTION
        assert output["documents"]
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_serve_refuses_a_port_in_use_before_loading_anything(no_model_loads: list[str]) -> None:
    """It said "Serving ... on http://127.0.0.1:P", loaded the index, then uvicorn could not bind
    and the process exited 3."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = invoke("serve", "--port", port)
    assert result.exit_code == 1
    assert_one_line_error(
        result, f"port {port}: Address already in use", "pick another with --port"
    )
    assert "Serving" not in result.stdout and no_model_loads == []


def test_render_answer_shows_queries_even_when_the_answer_streams_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Keys of a streamed sources dict arrive concurrently: the answer may come before queries."""
    from langchain_core.documents import Document
    from langchain_core.runnables import RunnableGenerator
    from rich.console import Console

    from rag_fusion_chain import rendering

    def chunks(_: Iterator[Any]) -> Iterator[dict[str, Any]]:
        yield {"documents": [Document("passage text", id="d1")]}
        yield {"answer": "The answer "}
        yield {"queries": ["first query", "second query"]}
        yield {"answer": "continues."}

    console = Console(record=True, width=120)
    monkeypatch.setattr(rendering, "output", console)
    rendering.render_answer(RunnableGenerator(chunks), "question?")
    text = console.export_text()
    assert "first query" in text and "second query" in text
    assert text.index("second query") < text.index("The answer continues.")


def test_progress_bars_count_steps_or_totals(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from rag_fusion_chain import rendering

    console = Console(record=True, width=100, force_terminal=False)
    monkeypatch.setattr(rendering, "errors", console)
    with rendering.progress_display() as steps:
        steps("embed", 3, 10)
        steps("embed", 4, 10)
    with rendering.progress_display("completed") as totals:
        totals("evaluate", 3, 10)
        totals("evaluate", 4, 10)
    bars = console.export_text().splitlines()
    assert bars[0].startswith("embed") and bars[0].endswith(" 7/10"), bars
    assert bars[1].startswith("evaluate") and bars[1].endswith(" 4/10"), bars


def test_an_error_under_progress_bars_follows_the_output_with_no_blank_line(
    tmp_path: Path,
) -> None:
    """``index`` and ``eval`` fail under their (erased) progress bars: stderr is the error line
    alone; rich's Progress.stop printed an empty line before it off a terminal."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for arguments in (
        ["index", empty, "--out", tmp_path / "index"],
        ["eval", empty, "--setups", "bm25", "--no-cache"],
    ):
        result = invoke(*arguments)
        assert result.exit_code == 1 and result.stderr.startswith("error: "), repr(result.stderr)
        assert_one_line_error(result)


# --------------------------------------------------------------------------------------------
# Arguments: checked before any model loads, in the command line's words
# --------------------------------------------------------------------------------------------


@pytest.fixture
def no_model_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every attempt to load a chat model, embeddings, an index or sources to index."""
    from rag_fusion_chain import cli
    from rag_fusion_chain.retrievers import index_directory

    calls: list[str] = []

    def refuse(name: str) -> Any:
        def record(*_: Any, **__: Any) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} was called")

        return record

    monkeypatch.setattr(cli.models, "chat_model", refuse("chat_model"))
    monkeypatch.setattr(cli.models, "embeddings", refuse("embeddings"))
    monkeypatch.setattr(cli, "open_index", refuse("open_index"))
    monkeypatch.setattr(index_directory, "_load", refuse("reading sources"))  # build_index's
    return calls


def test_an_empty_question_is_refused_before_any_model_loads(
    faiss_index: Path, no_model_loads: list[str]
) -> None:
    for command in ("ask", "retrieve"):
        for question in ("", "   "):
            result = invoke(command, question, "--index", faiss_index)
            assert_one_line_error(result, "question must not be empty")
    error = assert_one_line_error(invoke("demo", "--question", " "), "question must not be empty")
    assert "QUESTION" not in error  # demo's is an option, --question: not the argument's name
    assert no_model_loads == []


def test_demo_rebuild_without_an_index_is_refused(no_model_loads: list[str]) -> None:
    """``demo --rebuild`` without ``--index`` was accepted and did nothing."""
    assert_one_line_error(invoke("demo", "--rebuild"), "--rebuild needs --index")
    assert no_model_loads == []


def test_a_missing_index_is_refused_before_any_model_loads(
    tmp_path: Path, no_model_loads: list[str]
) -> None:
    for command in ("ask", "retrieve"):
        error = assert_one_line_error(
            invoke(command, QUESTION, "--index", tmp_path), "no index in", "rag-fusion index"
        )
        assert "build_index()" not in error
    assert no_model_loads == []


@pytest.mark.parametrize(
    ("arguments", "flag"),
    [(["-n", "-1"], "--queries"), (["-k", "0"], "--k"), (["--top-n", "0"], "--top-n")],
)
def test_counts_below_one_are_refused_with_the_flag_name(
    faiss_index: Path, no_model_loads: list[str], arguments: list[str], flag: str
) -> None:
    result = invoke("ask", QUESTION, "--index", faiss_index, *arguments)
    assert result.exit_code == 2, result.output
    assert flag in result.output and "Traceback" not in result.output
    assert "validation error" not in result.output.lower()
    assert "errors.pydantic.dev" not in result.output
    assert no_model_loads == []


def test_a_query_count_over_the_bound_is_refused_at_parse_time(
    faiss_index: Path, no_model_loads: list[str]
) -> None:
    """``-n 1000`` was refused only after the index loaded, as ``n``, not ``-n/--queries``."""
    result = invoke("ask", QUESTION, "--index", faiss_index, "-n", 1000)
    assert result.exit_code == 2, result.output
    assert "--queries" in result.output and f"less than or equal to {MAX_QUERIES}" in result.output
    assert f"1<=x<={MAX_QUERIES}" in " ".join(invoke("ask", "--help").stdout.split())
    assert no_model_loads == []


@pytest.mark.parametrize(
    ("arguments", "flag"),
    [
        (["serve", "--port", "99999"], "--port"),  # was served on 34463 (99999 mod 65536)
        (["serve", "--port", "0"], "--port"),
        (["serve", "-p", "-5"], "--port"),
        (["index", "{corpus}", "--out", "{out}", "--chunk-size", "0"], "--chunk-size"),
        (["index", "{corpus}", "--out", "{out}", "--chunk-overlap", "-1"], "--chunk-overlap"),
    ],
)
def test_a_port_or_chunking_out_of_range_is_refused_with_the_flag_name(
    corpus: Path, tmp_path: Path, no_model_loads: list[str], arguments: list[str], flag: str
) -> None:
    given = [argument.format(corpus=corpus, out=tmp_path / "index") for argument in arguments]
    result = invoke(*given)
    assert result.exit_code == 2, result.output
    assert flag in result.output and "Traceback" not in result.output
    assert no_model_loads == [] and not (tmp_path / "index").exists()


def test_an_index_folder_that_is_a_file_is_refused_with_the_flag_name(
    corpus: Path, tmp_path: Path, no_model_loads: list[str]
) -> None:
    """``index --out FILE`` said ``error: [Errno 20] Not a directory: '/abs/FILE/.versions'``."""
    existing = tmp_path / "notadir"
    existing.write_text("the user's file", "utf-8")
    for arguments in (["index", corpus / "wind.txt", "--out"], ["demo", "--index"]):
        result = invoke(*arguments, existing)
        assert result.exit_code == 2, result.output
        assert f"'{arguments[-1]}'" in result.output and "is a file" in result.output
        assert "Errno" not in result.output and "Traceback" not in result.output
    assert existing.read_text("utf-8") == "the user's file" and no_model_loads == []


def test_boolean_options_are_flags_in_help_and_parsing(
    faiss_index: Path, no_model_loads: list[str]
) -> None:
    help_text = invoke("ask", "--help").stdout
    assert "--hybrid / --no-hybrid" in help_text
    assert "<bool>" not in help_text
    assert re.search(r"--trust-index\s+Load", help_text), help_text
    refused = invoke("ask", QUESTION, "--index", faiss_index, "--hybrid", "false")
    assert refused.exit_code == 2 and "false" in refused.output
    assert no_model_loads == []


def test_help_texts_say_what_each_command_does_with_embeddings() -> None:
    asked = " ".join(invoke("ask", "--help").stdout.split())
    assert "Default: the ones the index was built with" in asked
    listed = f"Query strategy: {', '.join(strategies.STRATEGIES)}."  # from the registry
    assert "".join(listed.split()) in "".join(asked.split())  # click may wrap at a hyphen
    for command in ("eval", "index"):
        text = " ".join(invoke(command, "--help").stdout.split())
        assert "index's own" not in text and "the index was built with" not in text
        assert "Default: $RAG_FUSION_EMBEDDING, else minilm" in text
    for command in ("ask", "retrieve", "serve", "eval", "index"):  # every name models takes
        unwrapped = "".join(invoke(command, "--help").stdout.split())
        assert all(f"{name}," in unwrapped for name in models._MINILM_NAMES), command
    from rag_fusion_chain.evaluate import DEFAULT_CACHE_DIR  # where eval caches, XDG honoured

    assert f"Default:{DEFAULT_CACHE_DIR}." in "".join(invoke("eval", "--help").stdout.split())


def test_the_command_list_shows_each_commands_summary_whole() -> None:
    """Click cuts a command's first sentence to fit the list: 'with a...' was all 'index' said."""
    listed = invoke("--help").stdout.split("Commands:")[1]
    assert "..." not in listed and all(name in listed for name in ("index", "eval", "serve"))


def test_library_words_become_command_line_words() -> None:
    from rag_fusion_chain.rendering import describe
    from rag_fusion_chain.retrievers.signing import TRUST_ADVICE, UntrustedIndexError

    untrusted = describe(UntrustedIndexError(f"the index was changed. {TRUST_ADVICE}"))
    assert "--trust-index" in untrusted and "trust=True" not in untrusted
    assert describe(
        FileExistsError("an index exists in x; pass force=True (rag-fusion index --force)")
    ) == ("an index exists in x; add --force")
    assert describe(ValueError("setups: unknown setup 'x'")) == "--setups: unknown setup 'x'"
    unnamed = describe(
        ValueError("no chat model name for x: pass model= or set RAG_FUSION_CHAT_MODEL")
    )
    assert unnamed == "no chat model name for x: add --model or set RAG_FUSION_CHAT_MODEL"
    keyless = describe(ValueError("model at x needs an API key: pass api_key= or set KEY"))
    assert keyless == "model at x needs an API key: set KEY"  # no such option, the clause goes
    assert describe(ConnectionError("refused")) == "refused"  # usual errors: no type name
    assert describe(TimeoutError()) == "TimeoutError"
    assert describe(RuntimeError("stuck")) == "RuntimeError: stuck"


def test_an_existing_index_is_refused_before_loading_anything(
    faiss_index: Path, corpus: Path, no_model_loads: list[str]
) -> None:
    error = assert_one_line_error(
        invoke("index", corpus / "solar.txt", "--out", faiss_index), "--force"
    )
    assert "force=True" not in error and "update=True" not in error
    assert error.endswith(": add --update or --force")
    assert no_model_loads == []


def test_ask_json_has_the_answer_queries_scored_documents_and_failures(
    faiss_index: Path,
) -> None:
    result = invoke("ask", QUESTION, "--index", faiss_index, "--json", "--hybrid", "-n", 2)
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["answer"].startswith(OFFLINE_LABEL)
    assert record["question"] == QUESTION and record["strategy"] == "rag-fusion"
    assert record["queries"][0] == QUESTION and len(record["queries"]) == 3
    documents = record["documents"]
    assert documents and [document["rank"] for document in documents] == list(
        range(1, len(documents) + 1)
    )
    fusion_scores = [document["fusion_score"] for document in documents]
    assert fusion_scores == sorted(fusion_scores, reverse=True)
    for document in documents:
        assert document["hits"], document
        assert {hit["query"] for hit in document["hits"]} <= set(record["queries"])
    assert record["failures"] == []
    assert "no chat model configured" in result.stderr  # notes stay off stdout


# --------------------------------------------------------------------------------------------
# The sources table
# --------------------------------------------------------------------------------------------


def table_text(table: Any, width: int = 80) -> str:
    from rich.console import Console

    console = Console(record=True, width=width)
    console.print(table)
    return console.export_text()


def cells_of_column(text: str, column: int) -> str:
    """The text of one table column, its wrapped lines joined."""
    rows = [line.split("│") for line in text.splitlines() if line.startswith("│")]
    return " ".join(row[column].strip() for row in rows if len(row) > column)


def test_the_sources_table_at_80_columns_shows_title_and_excerpt_once() -> None:
    from langchain_core.documents import Document

    from rag_fusion_chain.rendering import sources_table

    title = "Microstructural development of human newborn cerebral white matter"
    documents = [
        Document(
            f"{title}\nAlterations of the architecture of cerebral white matter in the "
            "developing human brain can affect cortical development.",
            id="4983",
            metadata={"title": title, "fusion_score": 0.0325},
        ),
        Document(
            "# Heat pumps\n\nHeat pumps move heat with a compressor.\n\n## Winter\nLess efficient.",
            metadata={"source": "/home/someone/notes/heat.md", "fusion_score": 0.0161},
        ),
    ]
    text = table_text(sources_table(documents))
    assert all(len(line) <= 80 for line in text.splitlines())
    titles, excerpts = cells_of_column(text, 2), cells_of_column(text, 3)
    assert title in titles and "Heat pumps (notes/heat.md)" in titles
    assert "Alterations of the architecture of cerebral white matter" in excerpts
    assert "Microstructural" not in excerpts and "# Heat" not in excerpts and "#" not in excerpts
    assert "compressor. Winter Less efficient." in excerpts  # a heading inside: its marks dropped
    assert excerpts.index("Alterations") < excerpts.index("Heat pumps move heat")
    assert "0.0325" in text and "reciprocal rank fusion" in text


def test_a_file_name_with_a_newline_stays_one_table_row() -> None:
    from langchain_core.documents import Document

    from rag_fusion_chain.rendering import sources_table

    documents = [
        Document(
            "Text.", id="a\nb", metadata={"source": "notes/x\n2 │ fake.md", "fusion_score": 0.5}
        ),
        Document("More.", id="c", metadata={"source": "notes/tab\there.md", "fusion_score": 0.25}),
    ]
    text = table_text(sources_table(documents, verbose=True), width=160)
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert len(rows) == len(documents), text
    assert "notes/x\\u000a2 │ fake.md" in rows[0] and "a\\u000ab" in rows[0]
    assert "notes/tab\\u0009here.md" in rows[1]


def test_retrieve_shows_one_explained_score_column_in_fused_order(faiss_index: Path) -> None:
    result = invoke("retrieve", QUESTION, "--index", faiss_index, "--hybrid", "-n", 2)
    assert result.exit_code == 0, result.output
    scores = [float(score) for score in re.findall(r"│ (0\.\d{4}) │", result.stdout)]
    assert scores and scores == sorted(scores, reverse=True)
    assert "over the 3 ranked lists" in " ".join(result.stdout.split())
    union = invoke("retrieve", QUESTION, "--index", faiss_index, "-s", "multi-query", "-v")
    assert union.exit_code == 0, union.output
    counts = re.findall(r"│ +(\d+)/(\d+) │", union.stdout)
    assert counts and all(1 <= int(found) <= int(lists) for found, lists in counts)
    assert "fusion=" not in union.stdout and "found in" in union.stdout
    found_by = cells_of_column(union.stdout, 5)  # --verbose: where each source was found
    assert re.search(r"q1 VectorRetriever #1 0\.\d+", found_by), found_by


def test_escape_sequences_in_documents_and_answers_are_neutralised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langchain_core.documents import Document
    from langchain_core.runnables import RunnableGenerator
    from rich.console import Console

    from rag_fusion_chain import rendering

    hostile = "Normal text \x1b[2J\x1b]0;owned\x07 then \u202eesrever and a bell\x07."
    document = Document(hostile, id="d1", metadata={"title": "Title \x1b[31mred"})

    def chunks(_: Iterator[Any]) -> Iterator[dict[str, Any]]:
        yield {"queries": ["query \x1b[1mbold"], "documents": [document]}
        yield {"answer": f"Quoted: {hostile} [1]"}

    console = Console(record=True, width=100, force_terminal=False)
    monkeypatch.setattr(rendering, "output", console)
    rendering.render_answer(RunnableGenerator(chunks), "question?")
    text = console.export_text()
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in text
    assert "\\u202eesrever" in text and "Title red" in text and "query bold" in text
    assert "\\u202e" in rendering.json_text({"text": hostile})
    assert json.loads(rendering.json_text({"text": hostile})) == {"text": hostile}


def test_error_lines_show_no_escape_or_bidi_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from rag_fusion_chain import rendering

    console = Console(record=True, width=200, force_terminal=False)
    monkeypatch.setattr(rendering, "errors", console)
    rendering.print_line("error", "red", "no index in /tmp/a\x1b]0;owned\x07b\u202eevil\x1b[2J")
    text = console.export_text()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert text.strip() == "error: no index in /tmp/ab\\u202eevil", text


def test_version_flag_prints_the_package_version() -> None:
    from typer.testing import CliRunner

    from rag_fusion_chain._version import __version__
    from rag_fusion_chain.cli import app

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"rag-fusion {__version__}"


def test_an_over_long_question_is_refused_before_the_index_is_opened(tmp_path) -> None:
    from typer.testing import CliRunner

    from rag_fusion_chain.cli import app

    missing = tmp_path / "no-index-here"
    result = CliRunner().invoke(app, ["ask", "x" * 50_000, "--index", str(missing)])
    assert result.exit_code != 0
    assert "50000 characters long" in result.output
    assert "no-index-here" not in result.output


def test_the_lists_counted_are_the_ones_fused_not_the_hybrids_inner_lists() -> None:
    """``--hybrid`` said "over the 15 ranked lists" for 5 queries: the hybrid retriever's own
    BM25 and vector lists were counted beside the 5 it returned, and ``-v`` showed BM25's score
    as the hybrid's. Counted now: one list per query and retriever of the chain, whatever calls
    them; not the lists inside the hybrid, nor the offline query step's BM25 search twice."""
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    from rag_fusion_chain import chains
    from rag_fusion_chain.fusion import FUSION_SCORE_KEY
    from rag_fusion_chain.rendering import RetrievedLists
    from rag_fusion_chain.rendering import _hits as hits_of
    from rag_fusion_chain.retrievers import BM25Retriever, hybrid_retriever

    texts = ["heat pumps move heat", "gas boilers burn gas", "solar panels make power", "heat"]
    documents = [Document(text, metadata={"source": f"{i}.md"}) for i, text in enumerate(texts)]
    bm25 = BM25Retriever.from_documents(documents)
    vectors = InMemoryVectorStore.from_documents(documents, DeterministicFakeEmbedding(size=8))
    hybrid = hybrid_retriever(bm25, vectors.as_retriever(), k=3)
    retrievers = [hybrid, bm25]  # BM25 alone and inside the hybrid
    chain = chains.chain_for("multi-query", retrievers, None, n=2, return_sources=True)
    collected = RetrievedLists()
    result = chain.invoke("how do heat pumps work", {"callbacks": [collected]})
    assert len(collected.lists) == 2 * len(result["queries"])
    assert sorted((ranked.query, ranked.source) for ranked in collected.lists) == sorted(
        (query, source) for query in result["queries"] for source in ("hybrid", "BM25Retriever")
    )
    hybrid_lists = {ranked.query: ranked for ranked in collected.lists if ranked.source == "hybrid"}
    for document in result["documents"]:
        for hit in hits_of(document, collected.lists):
            if hit["retriever"] == "hybrid":
                ranked = hybrid_lists[hit["query"]]
                assert hit["score"] == ranked[hit["rank"] - 1].metadata[FUSION_SCORE_KEY]


def test_retrieved_lists_skip_a_failed_retrieval() -> None:
    """A retriever that fails gives no list: the count is the lists that were fused."""
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.retrievers import BaseRetriever

    from rag_fusion_chain import chains
    from rag_fusion_chain.rendering import RetrievedLists

    class Flaky(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            if "fail" in query:
                raise ConnectionError("down")
            return [Document(query)]

    llm = FakeListChatModel(responses=["1. one\n2. fail\n3. two"])
    chain = chains.retrieval_chain("rag-fusion", [Flaky()], llm, n=3, include_original=False)
    collected = RetrievedLists()
    with pytest.warns(UserWarning, match="down"):
        chain.invoke("question", {"callbacks": [collected]})
    assert sorted(ranked.query for ranked in collected.lists) == ["one", "two"]
    assert {ranked.source for ranked in collected.lists} == {"Flaky"}


def test_ctrl_c_ends_with_one_line_and_exit_status_130(
    faiss_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C used to end the command with status 130 and not a word on the terminal."""
    from rag_fusion_chain import cli

    def interrupted(*_: Any, **__: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "open_index", interrupted)
    result = invoke("ask", QUESTION, "--index", faiss_index)
    assert result.exit_code == 130
    assert result.stderr.strip() == "interrupted: stopped by Ctrl-C"
    assert "Traceback" not in result.output


@pytest.mark.parametrize("strategy", ["hyde", "rewrite"])
def test_the_lists_counted_offline_are_the_searched_texts_not_the_question_it_drew_them_from(
    strategy: str,
) -> None:
    """Offline HyDE and rewrite search the question only to write their text, and fuse the text's
    list alone; `rag-fusion retrieve -s rewrite` said "over the 2 ranked lists" for its one query,
    and `-v` / `--json` showed the question's unfused list as hits ("q?")."""
    from langchain_core.documents import Document

    from rag_fusion_chain import chains
    from rag_fusion_chain.rendering import RetrievedLists, sources_table
    from rag_fusion_chain.retrievers import BM25Retriever

    texts = ["Heat pumps move heat in winter.", "Gas boilers burn gas.", "Winter air is cold."]
    bm25 = BM25Retriever.from_documents([Document(text) for text in texts])
    chain = chains.chain_for(strategy, [bm25], None, return_sources=True)
    collected = RetrievedLists()
    result = chain.invoke("heat pumps in winter", {"callbacks": [collected]})
    searched = [ranked.query for ranked in collected.lists]
    assert searched == result["queries"] and "heat pumps in winter" not in searched
    caption = " ".join(
        table_text(sources_table(result["documents"], lists=collected.lists)).split()
    )
    assert "over the 1 ranked list (one per query" in caption  # was "the 1 ranked lists"


@pytest.mark.parametrize("strategy", ["decomposition", "step-back"])
def test_the_score_caption_of_a_strategy_that_fuses_each_question_apart_says_so(
    strategy: str,
) -> None:
    """Decomposition and step-back fuse each question's lists apart, so a passage found for two of
    them shows one question's RRF; the caption said "the sum ... over the 3 ranked lists ...
    holding the passage", which its `-v` hits contradicted (two hits, the score of one)."""
    from rag_fusion_chain.cli import _fusion_shown
    from rag_fusion_chain.rendering import sources_table

    table = sources_table([], lists=[], fusion=_fusion_shown(strategy))
    caption = " ".join(table_text(table).split())
    assert "each question's lists fused apart" in caption
    assert "over the ranked lists of one question" in caption
    flat = " ".join(table_text(sources_table([], fusion=_fusion_shown("rag-fusion"))).split())
    assert "over the ranked lists (one per query and retriever) holding the passage" in flat


def test_a_model_server_that_cannot_be_reached_is_named_in_the_error() -> None:
    """`ask --model m --base-url http://127.0.0.1:9/v1` (or a stale $OPENAI_BASE_URL) ended with
    "error: OpenAIConnectionError: Connection error." and no word of where it tried."""
    import httpx
    import openai

    from rag_fusion_chain.rendering import describe

    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    message = describe(openai.APIConnectionError(request=request))
    assert (
        message == "APIConnectionError: Connection error. (http://127.0.0.1:9/v1/chat/completions)"
    )
    assert (
        describe(httpx.ConnectError("refused")) == "ConnectError: refused"
    )  # no request: as before
