"""Loaders (web, PDF, text, folders, BEIR) and token-aware splitting with stable chunk ids."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pymupdf
import pytest
from langchain_core.documents import Document

from rag_fusion_chain import ingest
from rag_fusion_chain.ingest import count_tokens, split_documents
from tests.conftest import StaticSite

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


def test_web_page_without_classes_keeps_everything(static_site: StaticSite):
    url = static_site.add("/post.html", BLOG_POST)

    (document,) = ingest.load([url])

    assert "Home | Archive" in document.page_content and "Copyright" in document.page_content
    assert document.metadata["title"] == "Fusion notes"


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


def test_http_error_without_a_response_is_a_clear_error(monkeypatch: pytest.MonkeyPatch):
    import requests
    from langchain_community.document_loaders import WebBaseLoader

    def fail(loader: WebBaseLoader) -> list[Document]:
        raise requests.HTTPError("proxy refused the tunnel")  # no response attached

    monkeypatch.setattr(WebBaseLoader, "load", fail)
    url = "https://example.org/post.html"

    with pytest.raises(ValueError, match="proxy refused the tunnel") as raised:
        ingest.load_web([url])
    assert url in str(raised.value)


def test_web_page_with_no_matching_text_warns_and_is_skipped(static_site: StaticSite):
    url = static_site.add("/post.html", BLOG_POST)

    with pytest.warns(UserWarning, match="no text found"):
        assert ingest.load_web([url], classes=["no-such-class"]) == []


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
    assert documents[1].metadata == {"source": str(path), "page": 2, "total_pages": 3}
    assert documents[1].id == f"{path}#page=3"


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

    sources = [Path(document.metadata["source"]).relative_to(tmp_path) for document in documents]
    assert sources == [Path("b.txt"), Path("sub/a.md"), Path("sub/c.markdown"), Path("sub/d.pdf")]
    assert documents[1].page_content == "# Title\n\nmarkdown body"
    assert documents[0].id == str(tmp_path / "b.txt")


def test_folder_extensions_can_be_chosen(tmp_path: Path):
    (tmp_path / "a.md").write_text("markdown", encoding="utf-8")
    (tmp_path / "b.txt").write_text("text", encoding="utf-8")

    documents = ingest.load_directory(tmp_path, extensions=[".MD"])

    assert [document.page_content for document in documents] == ["markdown"]


def test_missing_and_unreadable_files_are_clear_errors(tmp_path: Path):
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("café".encode("latin-1"))

    with pytest.raises(FileNotFoundError, match="nowhere.txt"):
        ingest.load([str(tmp_path / "nowhere.txt")])
    with pytest.raises(ValueError, match="latin1.txt is not UTF-8"):
        ingest.load([latin])
    with pytest.raises(ValueError, match="not a file"):
        ingest.load_text(tmp_path)
    with pytest.raises(ValueError, match="not a directory"):
        ingest.load_directory(latin)
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
    assert first.metadata == {"y": 1, "doc_id": "d1", "title": "RRF", "source": str(path)}
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
    ],
)
def test_broken_beir_corpus_names_the_line(tmp_path: Path, lines: list[str], message: str):
    with pytest.raises(ValueError, match=message):
        ingest.load_beir_corpus(write_jsonl(tmp_path / "corpus.jsonl", lines))


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


def test_special_token_text_is_ordinary_text():
    (chunk,) = split_documents([Document("before <|endoftext|> after", id="s")])

    assert chunk.page_content == "before <|endoftext|> after"
    assert count_tokens("<|endoftext|>") > 1


def test_overlap_larger_than_chunk_is_refused():
    with pytest.raises(ValueError, match="overlap"):
        ingest.text_splitter(chunk_size=10, chunk_overlap=20)


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
