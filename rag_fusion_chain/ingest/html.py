"""HTML to text with beautifulsoup4: the main text of a page and its title.

One function for HTML files (in folders or given alone) and web pages. Scripts, styles, forms,
navigation, page headers and footers, asides and hidden elements are dropped; the page's
``<main>`` (else its only ``<article>``, else its ``<body>``) is kept, one line per block element.

Parsing is bounded: lxml (C, linear time) first checks the nesting depth, and a page nested
deeper than :data:`MAX_HTML_DEPTH` elements raises :class:`HtmlLimitError` (BeautifulSoup's cost
grows with the square of the depth); the tree is then built with BeautifulSoup's lxml builder
and read in one walk, never edited sibling by sibling.

>>> page = html_to_text("<title>T</title><nav>Menu</nav><p>Hello <b>world</b>.</p>")
>>> (page.title, page.text)
('T', 'Hello world.')
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rag_fusion_chain.ingest.problems import missing_extra

DROPPED_TAGS = (
    "script", "style", "noscript", "template", "nav", "aside", "form", "button", "input",
    "select", "textarea", "iframe", "svg", "canvas", "object", "embed", "dialog", "menu",
)  # fmt: skip
"""Elements that hold no reading text (code, styling, navigation, controls, embedded media)."""
PAGE_FRAME_TAGS = ("header", "footer")
"""Dropped when they frame the page; kept inside an ``<article>``/``<main>``/``<section>``."""
DROPPED_ROLES = ("navigation", "banner", "contentinfo", "search", "complementary")
BLOCK_TAGS = frozenset((
    "address", "article", "blockquote", "br", "caption", "dd", "details", "div", "dl", "dt",
    "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li", "main", "ol", "p",
    "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
))  # fmt: skip
"""Elements that start a new line of text."""
_SPACES = re.compile(r"\s+")
MAX_HTML_DEPTH = 256
"""libxml2's own nesting limit: deeper pages are refused, not cut."""


class HtmlLimitError(ValueError):
    """A page beyond a parse bound (its nesting depth); the message names the bound."""


@dataclass(frozen=True)
class HtmlText:
    """The readable text of a page (one line per block) and its title (``""`` if none)."""

    text: str
    title: str


def html_to_text(
    markup: str | bytes, *, classes: Sequence[str] | None = None, encoding: str | None = None
) -> HtmlText:
    """The main text and the title of an HTML page.

    ``classes``: keep only elements having one of these classes (and what they contain).
    ``encoding``: the charset a server declared for ``markup`` given as bytes (else it is read
    from the page's ``<meta>``, or guessed).

    >>> html_to_text('<div class="post">Kept</div><p>Dropped</p>', classes=["post"]).text
    'Kept'
    """
    try:
        from bs4 import BeautifulSoup
    except ImportError as error:
        raise ImportError(missing_extra("beautifulsoup4", "ingest")) from error
    _check_depth(markup)
    options: dict[str, Any] = {"from_encoding": encoding} if isinstance(markup, bytes) else {}
    soup = BeautifulSoup(markup, "lxml", **options)
    title = _title(soup)
    _drop_non_text(soup)
    roots = _matching(soup, classes) if classes else [_main_element(soup)]
    text = "\n".join(line for root in roots for line in _lines(root))
    return HtmlText(text=text, title=title)


def _check_depth(markup: str | bytes) -> None:
    """HtmlLimitError if ``markup`` nests deeper than :data:`MAX_HTML_DEPTH` (lxml's check)."""
    try:
        from lxml import etree, html
    except ImportError as error:
        raise ImportError(missing_extra("lxml", "ingest")) from error
    parser = html.HTMLParser()
    with contextlib.suppress(etree.LxmlError):
        etree.fromstring(markup, parser)
    if any(entry.type == etree.ErrorTypes.ERR_RESOURCE_LIMIT for entry in parser.error_log):
        raise HtmlLimitError(f"HTML nested deeper than the {MAX_HTML_DEPTH}-element limit")


def _title(soup: Any) -> str:
    element = soup.find("title") or soup.find("h1")
    return " ".join(element.get_text(" ").split()) if element else ""


def _drop_non_text(soup: Any) -> None:
    for element in soup.find_all(DROPPED_TAGS):
        element.decompose()
    for element in soup.find_all(PAGE_FRAME_TAGS):
        if element.find_parent(("article", "main", "section")) is None:
            element.decompose()
    hidden = soup.find_all(
        lambda tag: (
            tag.has_attr("hidden")
            or tag.get("aria-hidden") == "true"
            or tag.get("role") in DROPPED_ROLES
        )
    )
    for element in hidden:
        if not element.decomposed:
            element.decompose()
    for element in soup.find_all(("head", "title")):  # the title is kept as metadata
        element.decompose()


def _main_element(soup: Any) -> Any:
    articles = soup.find_all("article")
    return soup.find("main") or (articles[0] if len(articles) == 1 else None) or soup.body or soup


def _matching(soup: Any, classes: Sequence[str]) -> list[Any]:
    """The outermost elements having any of ``classes`` (also among several classes)."""
    wanted = set(classes)

    def has_class(tag: Any) -> bool:
        return not wanted.isdisjoint(tag.get("class") or ())

    return [tag for tag in soup.find_all(has_class) if tag.find_parent(has_class) is None]


def _lines(root: Any) -> list[str]:
    """The non-empty lines of ``root``: inline text joined, a new line at each block element."""
    parts: list[str] = []
    _collect_text(root, parts, preformatted=False)
    lines = (line.strip() for line in "".join(parts).split("\n"))
    return [line for line in lines if line]


def _collect_text(element: Any, parts: list[str], *, preformatted: bool) -> None:
    """Append the text under ``element`` to ``parts``: spaces collapsed outside ``<pre>``, a
    line break around each block element. Comments, doctypes and CDATA are left out."""
    from bs4 import NavigableString, Tag

    for child in element.children:
        if isinstance(child, Tag):
            if child.name == "br":
                parts.append("\n")
                continue
            block = child.name in BLOCK_TAGS
            if block:
                parts.append("\n")
            _collect_text(child, parts, preformatted=preformatted or child.name == "pre")
            if block:
                parts.append("\n")
        elif type(child) is NavigableString:
            parts.append(str(child) if preformatted else _SPACES.sub(" ", child))
