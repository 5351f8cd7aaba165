"""Loaders (web, PDF, text, folders, BEIR) and token-aware splitting with stable chunk ids."""

from __future__ import annotations

import contextlib
import json
import os
import socketserver
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from rag_fusion_chain import ingest, models
from rag_fusion_chain.ingest import (
    Skipped,
    SkippedSourceWarning,
    UnreadableSourceError,
    count_tokens,
    split_documents,
)
from rag_fusion_chain.ingest.files import import_pymupdf
from rag_fusion_chain.ingest.html import HtmlText, html_to_text
from tests.conftest import StaticSite

pymupdf = import_pymupdf()  # without its ONNX layout add-on, as the kit reads PDFs

BLOG_POST = """<!doctype html>
<html lang="en"><head><title>Fusion notes</title></head>
<body>
  <nav class="menu">Home | Archive | About</nav>
  <h1 class="post-title">Reciprocal rank fusion</h1>
  <div class="post-content entry">RRF adds one over k plus rank for every list.</div>
  <footer class="footer">Copyright nobody</footer>
</body></html>"""

CHINESE_SENTENCES = [
    "检索增强生成把外部知识引入大模型的回答",
    "互惠排名融合将多个排序列表合并为一个",
    "查询改写可以从不同角度生成多个问题",
    "向量检索与关键词检索各有优势，结合起来效果更好",
    "文档切分需要兼顾语义完整与长度限制",
]
CHINESE_ENDS = "。！？；"


def chinese_text(sentences: int = 400) -> str:
    """Numbered sentences (so no passage repeats) with a paragraph break every 37 sentences."""
    parts = []
    for number in range(sentences):
        sentence = CHINESE_SENTENCES[number % len(CHINESE_SENTENCES)]
        parts.append(f"第{number}条：{sentence}{CHINESE_ENDS[number % len(CHINESE_ENDS)]}")
        if number % 37 == 36:
            parts.append("\n\n")
    return "".join(parts)


# ---------------------------------------------------------------- web pages


def test_web_page_keeps_only_the_chosen_classes(static_site: StaticSite):
    url = static_site.add("/post.html", BLOG_POST)

    (document,) = ingest.load_web([url], classes=["post-title", "post-content"])

    assert document.page_content == (
        "Reciprocal rank fusion\nRRF adds one over k plus rank for every list."
    )
    assert document.id == url
    assert document.metadata["source"] == url


def test_web_page_keeps_its_main_text_and_title(static_site: StaticSite):
    url = static_site.add("/post.html", BLOG_POST)

    (document,) = ingest.load([url])

    assert document.page_content == (
        "Reciprocal rank fusion\nRRF adds one over k plus rank for every list."
    )
    assert document.metadata == {"source": url, "title": "Fusion notes"}


@pytest.mark.parametrize("declare_length", [True, False])
def test_oversized_web_page_is_refused(static_site: StaticSite, declare_length: bool):
    url = static_site.add("/big.html", "<p>" + "x" * 5000 + "</p>", declare_length=declare_length)

    with pytest.raises(ValueError, match="max_bytes=1000"):
        ingest.load_web([url], max_bytes=1000)
    assert ingest.load_web([url], max_bytes=6000)[0].page_content == "x" * 5000


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.org/a.html", "javascript:alert(1)", "http://"]
)
def test_only_http_urls_are_loaded(url: str):
    with pytest.raises(ValueError, match="only http"):
        ingest.load_web([url])


def test_slow_web_page_times_out(static_site: StaticSite):
    url = static_site.add("/slow.html", BLOG_POST, delay=1.0)

    with pytest.raises(TimeoutError, match="slow.html"):
        ingest.load_web([url], timeout=0.2)


def test_missing_web_page_is_a_clear_error(static_site: StaticSite):
    with pytest.raises(ValueError, match="404"):
        ingest.load_web([static_site.url("/gone.html")])


def test_web_page_with_no_matching_text_warns_and_is_skipped(static_site: StaticSite):
    url = static_site.add("/post.html", BLOG_POST)

    with pytest.warns(UserWarning, match="no text found"):
        assert ingest.load_web([url], classes=["no-such-class"]) == []


def test_url_credentials_reach_no_document_warning_or_error(static_site: StaticSite):
    # the fetcher never sends them; ingest.load alone (not only build_index) keeps them out of
    # the ids and sources it returns and of every message
    secret = "canary-pw-0d9e"
    with_credentials = static_site.add("/post.html", BLOG_POST).replace(
        "http://", f"http://reader:{secret}@"
    )
    (document,) = ingest.load([with_credentials])
    assert secret not in document.id and secret not in document.metadata["source"]
    assert document.id == with_credentials.replace(f"reader:{secret}", "***")
    with pytest.raises(ValueError, match="404") as missing:
        ingest.load_web([static_site.url("/gone.html").replace("http://", f"http://u:{secret}@")])
    assert secret not in str(missing.value) and secret not in missing.value.source
    gone = static_site.url("/gone.html").replace("http://", f"http://u:{secret}@")
    with pytest.raises(ValueError, match="nothing could be loaded") as nothing:
        ingest.load([gone])  # the summary of the sources given printed the password
    assert secret not in str(nothing.value)
    with pytest.warns(UserWarning):  # build_index records these skips in index.json as they are
        skipped = ingest.load_with_report([with_credentials, gone]).skipped
    assert skipped and all(secret not in f"{entry.source} {entry.reason}" for entry in skipped)
    with pytest.warns(UserWarning) as caught:
        ingest.load_web([with_credentials], classes=["no-such-class"])
    assert all(secret not in str(warning.message) for warning in caught)
    with pytest.raises(ValueError, match="only http") as refused:
        ingest.load_web([f"ftp://u:{secret}@example.org/a.html"])
    assert secret not in str(refused.value)


def test_a_url_of_non_ascii_text_is_fetched_percent_encoded_and_a_bad_host_is_a_skip(
    static_site: StaticSite,
):
    # both raised out of the load (UnicodeEncodeError, UnicodeError from IDNA): the whole index
    # failed, with a message naming no source
    static_site.add("/W%C3%A4rmepumpe?q=%C3%BC%20x", BLOG_POST)
    [page] = ingest.load([static_site.url("/Wärmepumpe?q=ü x")])
    assert page.metadata["title"] == "Fusion notes"
    bad_host = f"http://u:pw@{'a' * 64}.example/"  # a DNS label is at most 63 characters
    with pytest.warns(SkippedSourceWarning, match="idna"):
        result = ingest.load_with_report([bad_host, static_site.url("/W%C3%A4rmepumpe?q=ü x")])
    assert [entry.source for entry in result.skipped] == [bad_host.replace("u:pw", "***")]
    assert len(result.documents) == 1


def test_a_url_given_twice_is_fetched_once(static_site: StaticSite):
    # as a file given twice: read once, one set of documents; it was fetched (and kept) twice
    url = static_site.add("/post.html", BLOG_POST)
    gone = static_site.url("/gone.html")

    with pytest.warns(SkippedSourceWarning, match="404") as caught:
        result = ingest.load_with_report([url, gone, url, gone])
    assert [document.id for document in result.documents] == [url]
    assert result.loaded == [url]
    assert [entry.source for entry in result.skipped] == [gone]
    assert [warning.category for warning in caught].count(SkippedSourceWarning) == 1
    assert [document.id for document in ingest.load_web([url, url])] == [url]
    assert static_site.requests == {"/post.html": 2, "/gone.html": 1}


def test_single_url_string_is_refused():
    with pytest.raises(TypeError, match="list"):
        ingest.load_web("http://127.0.0.1/page.html")


# ---------------------------------------------------------------- PDF


def make_pdf(path: Path, pages: list[str]) -> Path:
    with pymupdf.open() as pdf:
        for text in pages:
            page = pdf.new_page()
            if text:
                page.insert_text((72, 72), text)
        pdf.save(path)
    return path


def test_pdf_gives_one_document_per_page_with_text(tmp_path: Path):
    path = make_pdf(tmp_path / "paper.pdf", ["Reciprocal rank fusion.", "", "Hybrid retrieval."])

    with pytest.warns(UserWarning, match="1 of 3 pages have no text"):
        documents = ingest.load([path])

    assert [document.metadata["page"] for document in documents] == [0, 2]
    assert documents[0].page_content.strip() == "Reciprocal rank fusion."
    # named by the file's name alone: no absolute path of the user's is shown or sent
    assert documents[1].metadata == {"source": "paper.pdf", "page": 2, "total_pages": 3}
    assert documents[1].id == "paper.pdf#page=3"


def test_broken_pdf_is_a_value_error_naming_the_file(tmp_path: Path):
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.7 this is not really a PDF")

    with pytest.raises(ValueError, match="broken.pdf"):
        ingest.load_pdf(path)


# ---------------------------------------------------------------- text, markdown, folders


def test_folder_is_loaded_recursively_by_extension(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "b.txt").write_text("plain text", encoding="utf-8")
    (tmp_path / "sub" / "a.md").write_text("# Title\n\nmarkdown body", encoding="utf-8")
    (tmp_path / "sub" / "c.markdown").write_text("more markdown", encoding="utf-8")
    (tmp_path / ".git" / "HEAD.txt").write_text("hidden", encoding="utf-8")
    (tmp_path / "script.py").write_text("print('code')", encoding="utf-8")
    make_pdf(tmp_path / "sub" / "d.pdf", ["pdf text"])

    documents = ingest.load([str(tmp_path)])

    sources = [
        Path(document.metadata["source"]).relative_to(tmp_path.name) for document in documents
    ]
    assert sources == [Path("b.txt"), Path("sub/a.md"), Path("sub/c.markdown"), Path("sub/d.pdf")]
    assert documents[1].page_content == "# Title\n\nmarkdown body"
    assert documents[0].id == f"{tmp_path.name}/b.txt"


def test_a_file_given_twice_is_read_once_by_its_first_name(tmp_path: Path, fake_embeddings: None):
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("sun", "water", "wind"):
        (folder / f"{name}.txt").write_text(f"The {name} powers homes.", encoding="utf-8")
    wind = folder / "wind.txt"

    for sources in ([folder, tmp_path / "." / "docs"], [folder, wind], [wind, folder]):
        result = ingest.load_with_report(sources)
        assert sorted(document.page_content for document in result.documents) == [
            "The sun powers homes.",
            "The water powers homes.",
            "The wind powers homes.",
        ]
        assert len(result.loaded) == 3
    assert result.loaded[0] == "wind.txt"  # given first alone: named so, not docs/wind.txt
    indexed = index_command(folder, wind, "--out", tmp_path / "index")
    assert "Indexed 3 sources as 3 documents" in indexed.stdout, indexed.output


def test_folder_extensions_can_be_chosen(tmp_path: Path):
    (tmp_path / "a.md").write_text("markdown", encoding="utf-8")
    (tmp_path / "b.txt").write_text("text", encoding="utf-8")

    documents = ingest.load([tmp_path], extensions=[".MD"])

    assert [document.page_content for document in documents] == ["markdown"]


def test_missing_and_unreadable_files_are_clear_errors(tmp_path: Path):
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("café".encode("latin-1"))

    with pytest.raises(FileNotFoundError, match="nowhere.txt"):
        ingest.load([str(tmp_path / "nowhere.txt")])
    with (
        pytest.raises(ValueError, match=r"latin1.txt \(not UTF-8\)"),
        pytest.warns(SkippedSourceWarning),
    ):
        ingest.load([latin])
    with pytest.raises(ValueError, match="cannot be read .Is a directory"):
        ingest.load_file(tmp_path)
    with pytest.raises(TypeError, match="list"):
        ingest.load(str(latin))


# ---------------------------------------------------------------- BEIR corpus


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_beir_corpus_maps_ids_titles_and_text(tmp_path: Path):
    path = write_jsonl(
        tmp_path / "corpus.jsonl",
        [
            json.dumps({"_id": "d1", "title": "RRF", "text": "Rank fusion.", "metadata": {"y": 1}}),
            "",
            json.dumps({"_id": 2, "title": "", "text": "No title here."}),
        ],
    )

    first, second = ingest.load([str(path)])

    assert (first.id, first.page_content) == ("d1", "RRF\nRank fusion.")
    assert first.metadata == {"y": 1, "doc_id": "d1", "title": "RRF", "source": path.name}
    assert (second.id, second.page_content, second.metadata["doc_id"]) == (
        "2",
        "No title here.",
        "2",
    )


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"_id": "a", "text": "x"}', "{not json"], r"corpus.jsonl:2: invalid JSON"),
        (['{"title": "no id"}'], r"corpus.jsonl:1: expected a JSON object with an '_id'"),
        (['{"_id": "a", "text": "x"}', '{"_id": "a", "text": "y"}'], "duplicate _id 'a'"),
        (["[" * 100_000], r"corpus.jsonl:1: invalid JSON"),  # was a RecursionError
        (['{"_id": ' + "1" * 5000 + "}"], r"corpus.jsonl:1: invalid JSON"),  # int digits limit
    ],
)
def test_broken_beir_corpus_names_the_line(tmp_path: Path, lines: list[str], message: str):
    with pytest.raises(UnreadableSourceError, match=message):  # a reported skip in a folder
        ingest.load_file(write_jsonl(tmp_path / "corpus.jsonl", lines))


def test_shipped_sample_corpus_loads_with_unique_ids():
    from rag_fusion_chain.data import sample_corpus_path

    documents = ingest.load([sample_corpus_path()])

    assert len(documents) == len({document.id for document in documents}) == 300
    assert all(document.metadata["doc_id"] == document.id for document in documents)


# ---------------------------------------------------------------- splitting


def test_chinese_text_splits_at_punctuation_within_the_token_budget():
    text = chinese_text()

    chunks = split_documents([Document(text, id="zh.txt")])

    assert count_tokens(text) > 5 * 300  # really needs several chunks
    assert all(count_tokens(chunk.page_content) <= 300 for chunk in chunks)
    assert all(chunk.page_content[-1] in CHINESE_ENDS for chunk in chunks)
    assert all(
        text[chunk.metadata["start_index"] :].startswith(chunk.page_content) for chunk in chunks
    )


def test_chunks_cover_the_whole_text_and_overlap_within_a_paragraph():
    text = chinese_text()

    chunks = split_documents([Document(text, id="zh.txt")])

    covered_until = 0
    overlaps = 0
    for chunk in chunks:
        start = chunk.metadata["start_index"]
        assert not text[covered_until:start].strip(), "text between chunks was lost"
        overlap = text[start:covered_until]
        overlaps += bool(overlap)
        assert count_tokens(overlap) <= 50 + 5
        covered_until = max(covered_until, start + len(chunk.page_content))
    assert covered_until == len(text.rstrip())
    assert overlaps >= len(chunks) // 2


def test_english_text_splits_at_sentences_with_small_chunks():
    text = " ".join(f"Sentence {index} is about fusing ranked lists." for index in range(60))

    chunks = split_documents([Document(text, id="en")], chunk_size=40, chunk_overlap=10)

    assert len(chunks) > 5
    assert all(count_tokens(chunk.page_content) <= 40 for chunk in chunks)
    assert all(chunk.page_content.endswith(".") for chunk in chunks)


def test_chunk_ids_are_stable_unique_and_set_on_the_document():
    documents = [
        Document(chinese_text(100), id="a.txt"),
        Document("Short text one.", metadata={"source": "same.md"}),
        Document("Short text two.", metadata={"source": "same.md"}),
        Document("No source at all."),
    ]
    before = [document.model_copy(deep=True) for document in documents]

    chunks = split_documents(documents)
    again = split_documents(documents)

    ids = [chunk.id for chunk in chunks]
    assert ids == [chunk.id for chunk in again]
    assert len(ids) == len(set(ids))
    assert all(chunk.metadata["chunk_id"] == chunk.id for chunk in chunks)
    assert ids[0] == "a.txt#0" and ids[1] == "a.txt#1"
    assert ids[-3:-1] == ["same.md#0", "same.md#1"]
    assert ids[-1].endswith("#0") and len(ids[-1]) == 16 + 2
    assert documents == before  # inputs untouched


def test_split_keeps_source_metadata():
    (chunk,) = split_documents([Document("Hi.", id="d1", metadata={"doc_id": "d1", "page": 3})])

    assert chunk.metadata == {"doc_id": "d1", "page": 3, "chunk_id": "d1#0", "start_index": 0}


def test_one_document_or_text_instead_of_a_list_is_a_type_error():
    with pytest.raises(TypeError, match="documents must be a list of Documents, not a Document"):
        split_documents(Document("One document, not wrapped in a list."))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="documents must be a list of Documents, not a str"):
        split_documents("a text")  # type: ignore[arg-type]


def test_special_token_text_is_ordinary_text():
    (chunk,) = split_documents([Document("before <|endoftext|> after", id="s")])

    assert chunk.page_content == "before <|endoftext|> after"
    assert count_tokens("<|endoftext|>") > 1


def test_overlap_larger_than_chunk_is_refused():
    with pytest.raises(ValueError, match="overlap"):
        split_documents([Document("text")], chunk_size=10, chunk_overlap=20)


def test_splitting_never_touches_the_network():
    script = (
        "import socket\n"
        "def refuse(*args, **kwargs): raise OSError('network disabled')\n"
        "socket.getaddrinfo = refuse\n"
        "socket.socket.connect = refuse\n"
        "from langchain_core.documents import Document\n"
        "from rag_fusion_chain.ingest import split_documents\n"
        "print(len(split_documents([Document('一句话。' * 500, id='x')])))\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )

    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 1


def test_empty_documents_give_no_chunks():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert split_documents([Document("", id="e"), Document("   \n", id="w")]) == []


# ---------------------------------------------------------------- HTML: main text, one function

NOISY_PAGE = """<!doctype html><html><head><title>Hive notes</title>
<style>body { color: red }</style><script>var tracking = "abc";</script></head><body>
<header class="site">Bee Blog</header><nav>Home | Archive</nav>
<main><article><header><h1>How much honey</h1></header>
<p>A strong colony stores <b>15-25 kg</b>
   of honey.</p><ul><li>Spring</li><li>Summer</li></ul>
<form><input name="q"><button>Search</button></form><aside>Related posts</aside>
<noscript>Enable JavaScript</noscript><!-- a comment --><div hidden>Hidden</div></article></main>
<footer>Copyright</footer></body></html>"""
MAIN_TEXT = "How much honey\nA strong colony stores 15-25 kg of honey.\nSpring\nSummer"


def test_html_to_text_keeps_the_main_text_and_the_title():
    assert html_to_text(NOISY_PAGE) == HtmlText(text=MAIN_TEXT, title="Hive notes")


def test_html_in_folders_alone_and_over_http_gives_the_same_text(
    tmp_path: Path, static_site: StaticSite
):
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "a.html").write_text(NOISY_PAGE, "utf-8")
    latin = '<html><head><meta charset="latin-1"><title>Menu</title></head><p>Café crème</p>'
    (folder / "b.htm").write_bytes(latin.encode("latin-1"))
    url = static_site.add("/a.html", NOISY_PAGE)

    in_folder = ingest.load([folder])
    alone = ingest.load([folder / "a.html"])
    fetched = ingest.load([url])

    assert [in_folder[0].page_content, alone[0].page_content, fetched[0].page_content] == [
        MAIN_TEXT
    ] * 3
    assert in_folder[0].metadata == {"source": f"{folder.name}/a.html", "title": "Hive notes"}
    assert fetched[0].metadata == {"source": url, "title": "Hive notes"}
    assert (in_folder[1].page_content, in_folder[1].metadata["title"]) == ("Café crème", "Menu")


# ---------------------------------------------------------------- skip and report


def messy_folder(tmp_path: Path) -> Path:
    """One good file and four that cannot be used (decoding, PDF, file name)."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "good.md").write_text("Bees make honey.", "utf-8")
    (folder / "latin1.txt").write_bytes("café".encode("latin-1"))
    (folder / "empty.pdf").write_bytes(b"")
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.7 not really a PDF")
    (folder / os.fsdecode(b"caf\xe9.md")).write_text("a name that is not UTF-8", "utf-8")
    return folder


MESSY_REASONS = {
    "caf\\xe9.md": "file name is not UTF-8",
    "corrupt.pdf": "corrupt PDF",
    "empty.pdf": "empty PDF",
    "latin1.txt": "not UTF-8",
}


def test_unusable_files_are_skipped_and_reported(tmp_path: Path):
    folder = messy_folder(tmp_path)

    with pytest.warns(SkippedSourceWarning) as warned:
        result = ingest.load_with_report([folder])

    assert [document.page_content for document in result.documents] == ["Bees make honey."]
    assert result.loaded == [f"{folder.name}/good.md"]
    assert {Path(entry.source).name: entry.reason for entry in result.skipped} == MESSY_REASONS
    assert all(not Path(entry.source).is_absolute() for entry in result.skipped)
    assert len(warned) == 4
    assert f"{folder.name}/latin1.txt (not UTF-8)" in ingest.describe_skipped(result.skipped)


def test_a_text_file_without_text_is_skipped_and_reported_as_an_empty_pdf_is(tmp_path: Path):
    # It was a document of no text: counted as indexed, and alone it made the CLI say
    # "documents: cannot build a BM25 index from no documents".
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "good.md").write_text("Bees make honey.", "utf-8")
    (folder / "empty.txt").write_bytes(b"")
    (folder / "blank.md").write_text(" \n\n\t\n", "utf-8")
    make_pdf(folder / "scan.pdf", ["", ""])  # was counted as an indexed file of no documents

    with pytest.warns(SkippedSourceWarning, match="no text found"):
        result = ingest.load_with_report([folder])

    assert result.loaded == [f"{folder.name}/good.md"]
    reasons = {Path(entry.source).name: entry.reason for entry in result.skipped}
    no_text = "no text found"
    scan = f"{no_text} (scanned images?)"
    assert reasons == {"blank.md": no_text, "empty.txt": no_text, "scan.pdf": scan}
    with pytest.raises(ValueError, match="empty.txt: no text found"):
        ingest.load_file(folder / "empty.txt")
    # alone, it was "no documents found in scan.pdf. Accepted: folders (...), those files alone"
    with pytest.raises(ValueError, match=r"nothing could be loaded .* scan.pdf \(no text found"):
        ingest.load([folder / "scan.pdf"])


def test_strict_loading_raises_the_problem(tmp_path: Path):
    (tmp_path / "good.md").write_text("fine", "utf-8")
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))

    with pytest.raises(ingest.UnreadableSourceError, match=r"latin1.txt: not UTF-8 \(byte 3"):
        ingest.load_with_report([tmp_path], strict=True)


def test_nothing_loaded_names_the_accepted_file_types(tmp_path: Path):
    (tmp_path / "script.py").write_text("print('code')", "utf-8")

    with pytest.raises(ValueError, match="no documents found in") as raised:
        ingest.load([tmp_path])

    message = str(raised.value)
    assert all(kind in message for kind in (".txt", ".md", ".html", ".htm", ".pdf", ".jsonl"))
    assert "URL" in message and "sources_or_documents" not in message


@pytest.fixture
def fake_embeddings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The index command embeds with a small fake model instead of loading MiniLM."""
    monkeypatch.setattr(models, "minilm_embeddings", lambda **_: DeterministicFakeEmbedding(size=8))


def index_command(*arguments: Any) -> Any:
    from typer.testing import CliRunner

    from rag_fusion_chain.cli import app

    return CliRunner().invoke(app, ["index", *(str(argument) for argument in arguments)])


def test_index_command_skips_and_summarises_or_fails_when_strict(
    tmp_path: Path, fake_embeddings: None
):
    folder = messy_folder(tmp_path)
    (folder / "big.txt").write_text("x" * 2_000, "utf-8")

    result = index_command(folder, "--out", tmp_path / "index", "--max-file-size", "0.001")

    assert result.exit_code == 0, result.output
    assert "Indexed 1 source as 1 document, 1 chunk (" in result.stdout  # not "1 documents"
    assert "embedded 1 chunk\n" in result.stdout  # not "1 chunks"
    assert "Skipped 5: " in result.stdout
    assert f"{folder.name}/latin1.txt (not UTF-8)" in result.stdout
    assert f"{folder.name}/big.txt (larger than the 1 kB limit)" in result.stdout
    assert "skipped" not in result.stderr  # said once, in the summary
    settings = json.loads((tmp_path / "index" / "index.json").read_text("utf-8"))
    assert settings["files"] == 1 and len(settings["skipped"]) == 5

    strict = index_command(folder, "--out", tmp_path / "strict", "--strict")

    assert strict.exit_code == 1
    assert "error: " in strict.stderr and "file name is not UTF-8" in strict.stderr
    assert not (tmp_path / "strict" / "index.json").exists()


# ---------------------------------------------------------------- folders stay inside


def folder_with_links_out(tmp_path: Path) -> tuple[Path, Path]:
    """A folder with a link to a key file outside, a link to a folder outside, a link inside
    and a link back to itself; returns (folder, key file)."""
    key = tmp_path / "keys" / "signing.txt"
    key.parent.mkdir()
    key.write_text("SECRET-SIGNING-KEY", "utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "outside.md").write_text("outside notes", "utf-8")
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "real.md").write_text("inside text", "utf-8")
    (folder / "alias.md").symlink_to(folder / "real.md")
    (folder / "key.txt").symlink_to(key)
    (folder / "more").symlink_to(elsewhere, target_is_directory=True)
    (folder / "loop").symlink_to(folder, target_is_directory=True)
    return folder, key


def test_folder_walk_stays_inside_unless_links_are_followed(tmp_path: Path):
    folder, _ = folder_with_links_out(tmp_path)

    with pytest.warns(SkippedSourceWarning, match="link to outside the folder"):
        result = ingest.load_with_report([folder])
    followed = ingest.load_with_report([folder], follow_symlinks=True)

    assert [document.page_content for document in result.documents] == ["inside text"]  # once
    assert result.loaded == [f"{folder.name}/alias.md"]  # the link inside, first by name
    assert result.skipped == [
        Skipped(f"{folder.name}/key.txt", "link to outside the folder"),
        Skipped(f"{folder.name}/more", "link to outside the folder"),
    ]
    assert sorted(document.page_content for document in followed.documents) == [
        "SECRET-SIGNING-KEY",
        "inside text",
        "outside notes",
    ]


def test_a_file_swapped_for_a_link_after_the_walk_is_not_read(tmp_path: Path):
    folder, key = folder_with_links_out(tmp_path)
    real = folder / "real.md"
    checked = real.stat()  # what the folder walk records of each file before reading it
    real.unlink()
    real.symlink_to(key)  # the race: swapped between the check and the read

    with pytest.raises(ingest.UnreadableSourceError, match="changed while being read"):
        ingest.load_file(real, identity=(checked.st_dev, checked.st_ino))


def test_index_command_keeps_a_linked_key_out_of_the_index(tmp_path: Path, fake_embeddings: None):
    folder, _ = folder_with_links_out(tmp_path)

    result = index_command(folder, "--out", tmp_path / "index")
    followed = index_command(folder, "--out", tmp_path / "followed", "--follow-symlinks")

    assert result.exit_code == 0 and followed.exit_code == 0, result.output + followed.output
    assert f"{folder.name}/key.txt (link to outside the folder)" in result.stdout
    stored = "".join(
        path.read_text("utf-8", "replace") for path in (tmp_path / "index").rglob("*.json")
    )
    assert "inside text" in stored and "SECRET-SIGNING-KEY" not in stored
    stored = "".join(
        path.read_text("utf-8", "replace") for path in (tmp_path / "followed").rglob("*.json")
    )
    assert "SECRET-SIGNING-KEY" in stored


# ---------------------------------------------------------------- size cap


def test_files_over_the_size_cap_are_skipped_without_being_read(tmp_path: Path):
    (tmp_path / "small.txt").write_text("small", "utf-8")
    (tmp_path / "big.txt").write_text("x" * 2_000, "utf-8")
    with (tmp_path / "huge.md").open("wb") as sparse:
        sparse.truncate(3 * 10**9)  # 3 GB on paper, no disk used: read whole it would not fit
    os.mkfifo(tmp_path / "pipe.txt")  # reading would wait forever for a writer

    with pytest.warns(SkippedSourceWarning):
        capped = ingest.load_with_report([tmp_path], max_file_size=1_000)
        default = ingest.load_with_report([tmp_path])

    assert [Path(source).name for source in capped.loaded] == ["small.txt"]
    assert {Path(entry.source).name: entry.reason for entry in capped.skipped} == {
        "big.txt": "larger than the 1 kB limit",
        "huge.md": "larger than the 1 kB limit",
        "pipe.txt": "not a regular file",
    }
    assert [Path(source).name for source in default.loaded] == ["big.txt", "small.txt"]
    assert {Path(entry.source).name: entry.reason for entry in default.skipped} == {
        "huge.md": "larger than the 50 MB limit",
        "pipe.txt": "not a regular file",
    }


def test_a_beir_corpus_over_the_cap_is_refused(tmp_path: Path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [json.dumps({"_id": str(n)}) for n in range(100)])

    with pytest.raises(ingest.UnreadableSourceError, match="larger than the 100 bytes limit"):
        ingest.load_file(path, max_file_size=100)
    assert len(ingest.load_file(path)) == 100
    with pytest.raises(ingest.UnreadableSourceError, match="larger than the 1 byte limit"):
        ingest.load_file(path, max_file_size=1)  # not "1 bytes"


@pytest.mark.parametrize("size", [0, -1, 1.5, True])
def test_the_size_cap_must_be_a_positive_int(tmp_path: Path, size: Any):
    with pytest.raises((ValueError, TypeError), match="max_file_size"):
        ingest.load([tmp_path], max_file_size=size)


# ---------------------------------------------------------------- URLs: wall clock, policy, types


class RawSite:
    """A server on 127.0.0.1 for what StaticSite cannot send: redirects, headers dripping."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        site = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                request_line = self.rfile.readline().decode()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                path = request_line.split()[1]
                with contextlib.suppress(OSError):
                    if path.startswith("/redirect?to="):
                        location = path.removeprefix("/redirect?to=")
                        self.wfile.write(
                            f"HTTP/1.1 302 Found\r\nLocation: {location}\r\n"
                            "Content-Length: 0\r\n\r\n".encode()
                        )
                    elif path == "/drip-headers":
                        headers = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Pad: "
                        for byte in headers + b"p" * 200:  # 1 byte per 0.2 s: about 50 s
                            if site.stop.wait(0.2):
                                return
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                    else:
                        body = BLOG_POST.encode()
                        self.wfile.write(
                            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                            + f"Content-Length: {len(body)}\r\n\r\n".encode()
                            + body
                        )

        socketserver.ThreadingTCPServer.daemon_threads = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.server.server_address[1]}{path}"


@pytest.fixture
def raw_site() -> Iterator[RawSite]:
    site = RawSite()
    site.thread.start()
    try:
        yield site
    finally:
        site.stop.set()
        site.server.shutdown()
        site.server.server_close()
        site.thread.join(timeout=5)


def test_headers_sent_a_byte_at_a_time_are_cut_off_at_the_timeout(raw_site: RawSite):
    url = raw_site.url("/drip-headers")
    started = time.monotonic()

    with pytest.raises(TimeoutError, match="did not answer within 1 s"):
        ingest.load_web([url], timeout=1)
    with pytest.warns(SkippedSourceWarning):
        result = ingest.load_with_report([url, raw_site.url("/page.html")], timeout=1)

    assert time.monotonic() - started < 10  # a behaviour bound (two fetches), not a benchmark
    assert result.skipped == [Skipped(url, "did not answer within 1 s")]
    assert [document.metadata["title"] for document in result.documents] == ["Fusion notes"]


def test_private_addresses_are_allowed_by_default_and_refused_when_denied(
    raw_site: RawSite, monkeypatch: pytest.MonkeyPatch
):
    url = raw_site.url("/page.html")
    monkeypatch.delenv(ingest.DENY_PRIVATE_ENV, raising=False)

    assert ingest.load_web([url])[0].metadata["title"] == "Fusion notes"
    with pytest.raises(ValueError, match="private address 127.0.0.1"):
        ingest.load_web([url], deny_private=True)
    with pytest.raises(ValueError, match="localhost is at the private address"):
        ingest.load_web([raw_site.url("/page.html", host="localhost")], deny_private=True)
    monkeypatch.setenv(ingest.DENY_PRIVATE_ENV, "1")
    with (
        pytest.raises(ValueError, match="private addresses are denied"),
        pytest.warns(SkippedSourceWarning),
    ):
        ingest.load([url])
    assert ingest.load_web([url], deny_private=False)


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("::ffff:127.0.0.1", False),  # IPv4-mapped
        ("64:ff9b::a9fe:a9fe", False),  # NAT64 (RFC 6052): 169.254.169.254 through the gateway
        ("64:ff9b::7f00:1", False),  # NAT64 to 127.0.0.1
        ("64:ff9b::808:808", True),  # NAT64 to 8.8.8.8
        ("2001:4860:4860::8888", True),
    ],
)
def test_an_ipv4_address_inside_ipv6_is_judged_as_ipv4(address: str, public: bool):
    # a NAT64 address of a private IPv4 one passed for public
    from rag_fusion_chain.ingest.web import is_public_address

    assert is_public_address(address) is public


def test_every_redirect_is_checked_against_the_address_policy(
    raw_site: RawSite, monkeypatch: pytest.MonkeyPatch
):
    from rag_fusion_chain.ingest import web

    monkeypatch.setattr(web, "is_public_address", lambda address: address == "127.0.0.1")
    inside = raw_site.url("/page.html", host="127.0.0.2")
    start = raw_site.url(f"/redirect?to={inside}")

    with pytest.raises(ValueError, match="private address 127.0.0.2"):
        ingest.load_web([start], deny_private=True)
    assert ingest.load_web([raw_site.url("/redirect?to=/page.html")], deny_private=True)


@pytest.mark.parametrize("content_type", ["image/png", "application/octet-stream"])
def test_binary_content_types_are_skipped_with_a_report(static_site: StaticSite, content_type: str):
    url = static_site.add("/file", b"\x89PNG\r\n\x1a\n\0\0binary", content_type=content_type)
    page = static_site.add("/ok.html", BLOG_POST)

    with pytest.raises(ValueError, match=f"content type {content_type} is not text"):
        ingest.load_web([url])
    with pytest.warns(SkippedSourceWarning):
        result = ingest.load_with_report([url, page])

    assert result.skipped == [Skipped(url, f"content type {content_type} is not text")]
    assert result.loaded == [page]


def test_pdf_and_plain_text_over_http_are_read(static_site: StaticSite, tmp_path: Path):
    pdf = make_pdf(tmp_path / "paper.pdf", ["Fusion over HTTP."]).read_bytes()
    pdf_url = static_site.add("/paper", pdf, content_type="application/pdf")
    text_url = static_site.add("/notes", "plain notes", content_type="text/plain; charset=utf-8")

    (page,) = ingest.load_web([pdf_url])
    (text,) = ingest.load_web([text_url])

    assert (page.page_content.strip(), page.id) == ("Fusion over HTTP.", f"{pdf_url}#page=1")
    assert (text.page_content, text.metadata) == ("plain notes", {"source": text_url})


def test_text_pages_are_read_as_text_files_are(static_site: StaticSite):
    """A page's declared charset decodes it; bytes it cannot decode, or a charset Python does not
    know, skip the page with the reason, as a file that is not UTF-8 is skipped."""
    latin = static_site.add(
        "/latin", "café".encode("latin-1"), content_type="text/plain; charset=latin-1"
    )
    bad = static_site.add("/bad", b"caf\xe9", content_type="text/plain")
    unknown = static_site.add("/unknown", "notes", content_type="text/plain; charset=x-nonsense")

    with pytest.warns(SkippedSourceWarning):
        result = ingest.load_with_report([latin, bad, unknown])

    assert [document.page_content for document in result.documents] == ["café"]
    assert result.skipped == [
        Skipped(bad, "not UTF-8"),
        Skipped(unknown, "unknown charset x-nonsense"),
    ]


def test_index_command_denies_private_urls_when_asked(
    raw_site: RawSite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_embeddings: None
):
    monkeypatch.delenv(ingest.DENY_PRIVATE_ENV, raising=False)
    url = raw_site.url("/page.html")

    denied = index_command(url, "--out", tmp_path / "denied", "--deny-private")
    monkeypatch.setenv(ingest.DENY_PRIVATE_ENV, "1")
    allowed = index_command(url, "--out", tmp_path / "allowed", "--allow-private")

    assert denied.exit_code == 1 and "private addresses are denied" in denied.stderr
    assert allowed.exit_code == 0, allowed.output


def test_sources_are_named_relative_to_what_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """No absolute path of the user's documents is stored, sent or shown (issue 22 item 6)."""
    for parent in ("a", "b"):
        (tmp_path / parent / "docs" / "sub").mkdir(parents=True)
        (tmp_path / parent / "docs" / "sub" / "x.md").write_text(f"note in {parent}", "utf-8")
    (tmp_path / "paper.txt").write_text("a paper", "utf-8")
    monkeypatch.chdir(tmp_path / "a")

    relative = ingest.load_with_report(["docs/", str(tmp_path / "paper.txt")])
    absolute = ingest.load_with_report([tmp_path / "a" / "docs"])
    both = ingest.load_with_report([tmp_path / "a" / "docs", tmp_path / "b" / "docs"])

    assert [d.metadata["source"] for d in relative.documents] == ["docs/sub/x.md", "paper.txt"]
    assert relative.loaded == ["docs/sub/x.md", "paper.txt"]
    assert [d.metadata["source"] for d in absolute.documents] == ["docs/sub/x.md"]
    # two folders of one name keep the paths as given, so that their ids stay distinct
    assert [d.id for d in both.documents] == [
        str(tmp_path / parent / "docs" / "sub" / "x.md") for parent in ("a", "b")
    ]


@pytest.fixture
def tls_site(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """BLOG_POST over https on 127.0.0.1, its certificate self-signed for ``localhost`` only."""
    import http.server
    import shutil
    import ssl

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = BLOG_POST.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *arguments: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://localhost:{server.server_address[1]}/post.html", cert
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_https_pages_are_verified_by_certificate_and_host_name(
    tls_site: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
):
    import certifi

    url, cert = tls_site
    with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        ingest.load_web([url])  # a certificate no trusted authority signed
    monkeypatch.setattr(certifi, "where", lambda: str(cert))

    (document,) = ingest.load_web([url])

    assert document.metadata == {"source": url, "title": "Fusion notes"}
    with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        ingest.load_web([url.replace("localhost", "127.0.0.1")])  # not the certificate's name
