"""Every parse is bounded (issue 22 item 2) and loaded text holds no terminal escapes (issue 20 item 5)."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest

from rag_fusion_chain import ingest
from rag_fusion_chain.ingest import files, html
from tests.conftest import StaticSite

pymupdf = files.import_pymupdf()  # without its ONNX layout add-on, as the kit reads PDFs

HANG_GUARD = 10.0
"""Seconds: the issue's bound for each hostile file (a hang guard, not a benchmark)."""


def _pdf_bomb(pages: int = 200) -> bytes:
    """A small PDF whose pages all share one compressed content stream of ~1M characters."""
    with pymupdf.open() as pdf:
        first = pdf.new_page()
        first.insert_text((10, 10), "x")  # registers a font resource
        xref = first.get_contents()[0]
        line = b"BT /helv 5 Tf 10 10 Td (" + b"bomb " * 200 + b") Tj ET\n"
        pdf.update_stream(xref, line * 1000)
        resources = pdf.xref_get_key(pdf.page_xref(0), "Resources")[1]
        for _ in range(pages - 1):
            pdf.new_page()
        for number in range(1, pages):
            pdf.xref_set_key(pdf.page_xref(number), "Resources", resources)
            pdf.xref_set_key(pdf.page_xref(number), "Contents", f"{xref} 0 R")
        return pdf.tobytes(garbage=0, deflate=True)


def _load_timed(folder: Path) -> tuple[ingest.LoadResult, float]:
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = ingest.load_with_report([folder])
    return result, time.monotonic() - started


@pytest.mark.parametrize(
    ("name", "markup"),
    [
        ("divs.html", "<html><body>" + "<div>x" * 30_000 + "</div>" * 30_000),
        ("bold.html", "<p>" + "<b>" * 1_000_000 + "text"),
        ("flat.html", "<html><body>" + "<p>a flat page of text</p>\n" * 1_800_000),  # ~49 MB
    ],
)
def test_hostile_html_is_skipped_with_its_bound_and_the_folder_still_loads(
    tmp_path: Path, name: str, markup: str
) -> None:
    (tmp_path / name).write_text(markup)
    (tmp_path / "good.md").write_text("A good note about rank fusion.")
    result, seconds = _load_timed(tmp_path)
    assert seconds < HANG_GUARD
    assert result.loaded == [f"{tmp_path.name}/good.md"]
    [skipped] = result.skipped
    assert skipped.source == f"{tmp_path.name}/{name}"
    assert "limit" in skipped.reason  # the bound is named
    assert "256" in skipped.reason or "3 MB" in skipped.reason


def test_html_within_bounds_still_parses_and_keeps_depth_under_the_limit() -> None:
    page = html.html_to_text("<title>T</title>" + "<div>" * 200 + "deep text" + "</div>" * 200)
    assert (page.title, page.text) == ("T", "deep text")


def test_a_fetched_page_goes_through_the_same_parse_bound(static_site: StaticSite) -> None:
    body = "<p>" + "<b>" * 300_000 + "t"  # under the size limit: depth is the bound
    url = static_site.add("/deep.html", body)
    started = time.monotonic()
    with pytest.raises(ingest.UnreadableSourceError, match="256-element limit"):
        ingest.load_web([url])
    assert time.monotonic() - started < HANG_GUARD


def test_a_shared_stream_pdf_bomb_is_skipped_with_its_bound(tmp_path: Path) -> None:
    (tmp_path / "bomb.pdf").write_bytes(_pdf_bomb())
    assert (tmp_path / "bomb.pdf").stat().st_size < 100_000
    (tmp_path / "good.md").write_text("A good note about rank fusion.")
    result, seconds = _load_timed(tmp_path)
    assert seconds < HANG_GUARD
    assert result.loaded == [f"{tmp_path.name}/good.md"]
    [skipped] = result.skipped
    assert skipped.reason in (
        f"PDF text beyond the {files.MAX_PDF_CHARACTERS:,}-character limit",
        f"PDF pages take longer than the {files.PDF_TIME_BUDGET:g} s limit to read",
    )


def test_a_pdf_over_the_time_budget_is_skipped_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "PDF_TIME_BUDGET", 0.0)
    (tmp_path / "slow.pdf").write_bytes(_pdf_bomb(pages=3))
    with pytest.raises(ingest.UnreadableSourceError, match="longer than the 0 s limit"):
        ingest.load_pdf(tmp_path / "slow.pdf")


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("note.md", "\x1b[31mRED TEXT\x1b[0m and \x1b]0;title\x07plain\x00 words\n"),
        ("page.html", "<p>\x1b[31mRED TEXT\x1b[0m and \x1b]0;title\x07plain\x08 words</p>"),
    ],
)
def test_terminal_escapes_and_control_characters_are_dropped_from_loaded_text(
    tmp_path: Path, name: str, content: str
) -> None:
    (tmp_path / name).write_text(content)
    [document] = ingest.load_file(tmp_path / name)
    assert document.page_content.strip() == "RED TEXT and plain words"


def test_escapes_are_dropped_from_pdf_text(tmp_path: Path) -> None:
    with pymupdf.open() as pdf:
        pdf.new_page().insert_text((50, 50), "RED\x1b[31m TEXT\x07 here")
        (tmp_path / "colour.pdf").write_bytes(pdf.tobytes())
    [page] = ingest.load_pdf(tmp_path / "colour.pdf")
    assert "\x1b" not in page.page_content and "\x07" not in page.page_content
    assert "[31m" not in page.page_content


def test_escapes_are_dropped_from_plain_text_pages(static_site: StaticSite) -> None:
    url = static_site.add(
        "/notes", "\x1b[31mRED TEXT\x1b[0m and plain\x00 words", content_type="text/plain"
    )
    [page] = ingest.load_web([url])
    assert page.page_content == "RED TEXT and plain words"
