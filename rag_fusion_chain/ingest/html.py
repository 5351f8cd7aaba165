"""HTML to text with beautifulsoup4: a page's main text (one line per block) and its title; lxml
first checks the nesting depth in linear time (BeautifulSoup's cost grows with its square)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from rag_fusion_chain.validation import require_extra

DROPPED_TAGS = (
    "script", "style", "noscript", "template", "nav", "aside", "form", "button", "input",
    "select", "textarea", "iframe", "svg", "canvas", "object", "embed", "dialog", "menu",
    "head", "title",  # the title is kept apart
)  # fmt: skip
PAGE_FRAME_TAGS = ("header", "footer")
"""Dropped when they frame the page; kept inside an ``<article>``/``<main>``/``<section>``."""
DROPPED_ROLES = ("navigation", "banner", "contentinfo", "search", "complementary")
BLOCK_TAGS = frozenset((
    "address", "article", "blockquote", "br", "caption", "dd", "details", "div", "dl", "dt",
    "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li", "main", "ol", "p",
    "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
))  # fmt: skip
MAX_HTML_DEPTH = 256
"""libxml2's own nesting limit: deeper pages are refused, not cut."""
_SPACES = re.compile(r"\s+")


class HtmlLimitError(ValueError):
    """A page beyond a parse bound (its nesting depth); the message names the bound."""


class HtmlText(NamedTuple):
    """The readable text of a page (one line per block) and its title (``""`` if none)."""

    text: str
    title: str


def html_to_text(
    markup: str | bytes, *, classes: Sequence[str] | None = None, encoding: str | None = None
) -> HtmlText:
    """The title and main text of a page (``<main>``, else its only ``<article>``, else ``<body>``),
    or with ``classes`` the text of elements having one; HtmlLimitError past the depth bound."""
    bs4 = require_extra("bs4", "ingest")  # an optional extra: imported here, once a page
    etree, html = require_extra("lxml.etree", "ingest"), require_extra("lxml.html", "ingest")
    parser = html.HTMLParser()
    with contextlib.suppress(etree.LxmlError):
        etree.fromstring(markup, parser)
    if any(entry.type == etree.ErrorTypes.ERR_RESOURCE_LIMIT for entry in parser.error_log):
        raise HtmlLimitError(f"HTML nested deeper than the {MAX_HTML_DEPTH}-element limit")
    options: dict[str, Any] = {"from_encoding": encoding} if isinstance(markup, bytes) else {}
    soup = bs4.BeautifulSoup(markup, "lxml", **options)
    heading = soup.find("title") or soup.find("h1")
    title = " ".join(heading.get_text(" ").split()) if heading else ""
    for element in soup.find_all(_is_dropped):
        if not element.decomposed:  # inside one dropped already
            element.decompose()
    if classes:
        wanted = list(classes)
        roots = [tag for tag in soup.find_all(class_=wanted) if not tag.find_parent(class_=wanted)]
    else:
        articles = soup.find_all("article")
        single = articles[0] if len(articles) == 1 else None
        roots = [soup.find("main") or single or soup.body or soup]
    parts: list[str] = []
    for root in roots:
        _collect_text(root, parts, bs4, preformatted=False)
        parts.append("\n")
    lines = (line.strip() for line in "".join(parts).split("\n"))
    return HtmlText(text="\n".join(line for line in lines if line), title=title)


def _is_dropped(tag: Any) -> bool:
    """Whether ``tag`` holds no reading text: code, controls, navigation, hidden, a page frame."""
    frame = tag.name in PAGE_FRAME_TAGS and tag.find_parent(("article", "main", "section")) is None
    hidden = tag.has_attr("hidden") or tag.get("aria-hidden") == "true"
    return frame or hidden or tag.name in DROPPED_TAGS or tag.get("role") in DROPPED_ROLES


def _collect_text(element: Any, parts: list[str], bs4: Any, *, preformatted: bool) -> None:
    """Append the text under ``element`` (``bs4``: the module): spaces collapsed outside ``<pre>``,
    a line break around each block element; comments, doctypes and CDATA left out."""
    for child in element.children:
        if isinstance(child, bs4.Tag):
            block = child.name in BLOCK_TAGS
            parts.append("\n" if block else "")
            if child.name != "br":
                _collect_text(child, parts, bs4, preformatted=preformatted or child.name == "pre")
            parts.append("\n" if block else "")
        elif type(child) is bs4.NavigableString:
            parts.append(str(child) if preformatted else _SPACES.sub(" ", child))
