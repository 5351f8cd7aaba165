"""What the command line prints, through two rich consoles that tests can swap: :data:`output`
(stdout) and :data:`errors` (stderr). Nothing here retrieves or answers."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import PurePath
from typing import Any, Literal

import typer
from langchain_core.documents import Document
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.schemas import Run
from pydantic import ValidationError
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress
from rich.table import Table
from rich.text import Text

from rag_fusion_chain import models
from rag_fusion_chain.fusion import FUSION_SCORE_KEY, RRF_K, SCORE_KEY, RankedList, document_id
from rag_fusion_chain.validation import TERMINAL_ESCAPE, counted

output = Console(highlight=False)
errors = Console(stderr=True, highlight=False)


def say(text: str) -> None:
    """One message on stdout, as it is: no markup, never wrapped mid-path."""
    output.print(text, markup=False, soft_wrap=True)


def print_line(label: str, style: str, message: object) -> None:
    """One ``label: message`` line on stderr (no escapes, bidi or control characters), the API key
    from the environment redacted."""
    text = printable(" ".join(str(message).split()))
    secret = os.environ.get(models.API_KEY_ENV)
    text = text.replace(secret, "***") if secret else text
    errors.print(Text(f"{label}: ", style=style) + Text(text), soft_wrap=True)


_FLAGS = {"force=True": "--force", "update=True": "--update", "trust=True": "--trust-index"}
_FLAGS["model="] = "--model"
_FLAGS["api_key="] = ""  # no option: a key on the command line would show in `ps`
_KEYWORD = re.compile(rf"\b(pass )?({'|'.join(_FLAGS)})(?: \([^)]*\))?( or )?")
_PARAMETERS = {"sources_or_documents:": "SOURCES:", "setups:": "--setups:"}


def describe(error: BaseException) -> str:
    """The usual errors' text, other errors with their type, pydantic errors as ``field: problem``;
    in the command line's words (``pass force=True`` becomes ``add --force``)."""
    if isinstance(error, ValidationError):
        return "; ".join(
            f"{'.'.join(map(str, problem['loc'])) or 'value'}: {problem['msg']}"
            for problem in error.errors()
        )
    message = _KEYWORD.sub(_in_flags, str(error))
    for parameter, flag in _PARAMETERS.items():
        if message.startswith(parameter):
            message = flag + message.removeprefix(parameter)
    message = message or type(error).__name__
    url = getattr(getattr(error, "__dict__", {}).get("request"), "url", None)  # OpenAI's: where
    message += f" ({url})" if url is not None and str(url) not in message else ""
    usual = (OSError, ValueError, TypeError, ImportError, KeyError)  # OSError: timeouts too
    return message if isinstance(error, usual) else f"{type(error).__name__}: {message}"


def _in_flags(keyword: re.Match[str]) -> str:
    """``pass force=True`` as ``add --force``; ``pass api_key= or`` dropped (no such option)."""
    flag = _FLAGS[keyword[2]]
    return ("add " if keyword[1] else "") + flag + (keyword[3] or "") if flag else ""


@contextlib.contextmanager
def reported_errors() -> Iterator[None]:
    """Errors as one ``error:`` line (exit 1), Ctrl-C as ``interrupted:`` (130), warnings on one line."""
    try:
        with warnings.catch_warnings():
            warnings.showwarning = lambda text, *_, **__: print_line("warning", "yellow", text)
            yield
    except (typer.Exit, typer.Abort):
        raise
    except KeyboardInterrupt:
        print_line("interrupted", "yellow", "stopped by Ctrl-C")
        raise typer.Exit(130) from None
    except Exception as error:  # noqa: BLE001 - reported on one line, as the CLI promises
        print_line("error", "bold red", describe(error))
        raise typer.Exit(1) from None


@contextlib.contextmanager
def progress_display(
    counts: Literal["advance", "completed"] = "advance",
) -> Iterator[Callable[[str, int, int], None]]:
    """Bars on stderr fed by a ``(task, count, total)`` callback (``count``: a step or the total
    done), erased if the work fails: a bar stopped midway would stand above the error line."""
    tasks: dict[str, Any] = {}
    with Progress(*Progress.get_default_columns(), MofNCompleteColumn(), console=errors) as shown:

        def report(task: str, count: int, total: int) -> None:
            if task not in tasks:
                tasks[task] = shown.add_task(task, total=total)
            shown.update(tasks[task], total=total, **{counts: count})  # type: ignore[arg-type]

        try:
            yield report
        except BaseException:
            shown.live.transient = True
            shown.live.stop()  # erased now: Progress.stop would add a blank line off a terminal
            shown.disable = True
            raise


_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Control characters and the bidirectional-text controls."""


def _escaped(text: str, keep: str = "") -> str:
    return _UNSAFE.sub(lambda hit: hit[0] if hit[0] in keep else f"\\u{ord(hit[0]):04x}", text)


def printable(text: str, keep: str = "") -> str:
    r"""``text`` without escape sequences, control (but ``keep``) and bidi characters as ``\uNNNN``."""
    return _escaped(TERMINAL_ESCAPE.sub("", text), keep)


def json_text(record: Any) -> str:
    """``record`` as indented JSON, C1 and bidi controls escaped too (the value is unchanged)."""
    return _escaped(json.dumps(record, ensure_ascii=False, indent=2, default=str), "\n")


class RetrievedLists(BaseTracer):
    """The ranked lists a ready chain fused, from its ``retrieve`` step: one per query and retriever
    (a hybrid's own inside its one; none for a failed search or offline HyDE/rewrite's question)."""

    lists: Sequence[RankedList] = ()

    def _persist_run(self, run: Run) -> None:
        """Nothing to keep but the lists."""

    def _on_chain_end(self, run: Run) -> None:
        if run.name == "retrieve" and isinstance((run.outputs or {}).get("retrieved"), list):
            self.lists = run.outputs["retrieved"]  # type: ignore[index]


def _hits(document: Document, lists: Sequence[RankedList]) -> list[dict[str, Any]]:
    """Each list holding the document; a fusing retriever's (hybrid's) score is its fused one."""
    key, hits = document_id(document), []
    for ranked in lists:
        for rank, hit in enumerate(ranked, 1):
            if document_id(hit) == key:
                score = hit.metadata.get(FUSION_SCORE_KEY, hit.metadata.get(SCORE_KEY))
                hits.append(
                    dict(query=ranked.query, retriever=ranked.source, rank=rank, score=score)
                )
    return hits


_TITLE_CHARACTERS, _EXCERPT_CHARACTERS = 100, 200
"""Text shown per source: rich wraps it, so 80 columns show a few lines each."""
_HEADING = re.compile(r"#{1,6}[ \t]+([^\n]+)")


def _shortened(text: str, limit: int) -> Text:
    return Text(printable(text if len(text) <= limit else text[: limit - 1].rstrip() + "…"))


def _heading(text: str) -> str | None:
    match = _HEADING.match(text)
    return " ".join(match[1].split()) if match else None


def _title_of(document: Document) -> str:
    """The title, else the leading markdown heading and the file's last two path parts (or URL)."""
    title = " ".join(str(document.metadata.get("title") or "").split())
    if title:
        return title
    source = str(document.metadata.get("source") or "").strip()
    if source and "://" not in source:
        source = "/".join(PurePath(source).parts[-2:])
    heading = _heading(document.page_content)
    if heading:
        return f"{heading} ({source})" if source else heading
    return source or str(document.id or "")


_HEADING_MARKS = re.compile(r"(?m)^[ \t]*#{1,6}[ \t]+")


def _excerpt_of(document: Document) -> str:
    """The text on one line without the heading or title it starts with (the title is shown),
    nor the marks of the Markdown headings inside it."""
    text = document.page_content.lstrip()
    if _heading(text) is not None:
        text = text.partition("\n")[2]
    text = " ".join(_HEADING_MARKS.sub("", text).split())
    title = " ".join(str(document.metadata.get("title") or "").split())
    if title and text.casefold().startswith(title.casefold()):
        text = text[len(title) :].lstrip(" .:;-–—")
    return text


def _fused_score(document: Document, union: bool, list_count: int) -> str:
    value = document.metadata.get(FUSION_SCORE_KEY)
    if not isinstance(value, (int, float)):
        return "–"
    return (f"{value:g}/{list_count}" if list_count else f"{value:g}") if union else f"{value:.4f}"


def _found_by(document: Document, lists: Sequence[RankedList], queries: Sequence[str]) -> Text:
    """The document's id, then each list holding it: query number, retriever, rank, its score."""
    lines = [printable(str(document.id or ""))]
    for hit in _hits(document, lists):
        number = queries.index(hit["query"]) + 1 if hit["query"] in queries else "?"
        score = f" {hit['score']:.3g}" if isinstance(hit["score"], (int, float)) else ""
        lines.append(f"q{number} {printable(hit['retriever'])} #{hit['rank']}{score}")
    return Text("\n".join(lines), overflow="fold")


def sources_table(
    documents: Sequence[Document],
    *,
    lists: Sequence[RankedList] = (),
    queries: Sequence[str] = (),
    fusion: str = "rrf",
    verbose: bool = False,
) -> Table:
    """The fused documents as the answer cites them, score explained; ``verbose`` adds where found."""
    union, count = fusion == "union", len(lists)  # fusion: rrf, union, or grouped (RRF apart)
    lists_named = f"the {counted(count, 'ranked list')}" if count else "the ranked lists"
    lists_named += " (one per query and retriever)"
    found_in = f"found in: how many of {lists_named} returned the passage"
    rrf = f"RRF: reciprocal rank fusion, the sum of 1/({RRF_K} + rank) over {lists_named} holding the passage; rows in fused order"
    grouped = f"RRF: reciprocal rank fusion, the sum of 1/({RRF_K} + rank) over the ranked lists of one question holding the passage (each question's lists fused apart; rows by question, each in fused order)"
    caption = {"union": found_in, "rrf": rrf}.get(fusion, grouped)
    table = Table(
        title="Fused sources", caption=caption, title_justify="left", caption_justify="left"
    )
    table.add_column("#", justify="right")
    table.add_column("title / source", ratio=1, min_width=12)
    table.add_column("excerpt", ratio=2, min_width=20)
    table.add_column("found in" if union else "RRF", justify="right", no_wrap=True)
    if verbose:
        table.add_column("id / found by (query, retriever, rank, score)", ratio=1)
    for number, document in enumerate(documents, 1):
        title = _shortened(_title_of(document), _TITLE_CHARACTERS)
        excerpt = _shortened(_excerpt_of(document), _EXCERPT_CHARACTERS)
        cells: list[Any] = [str(number), title, excerpt, _fused_score(document, union, count)]
        if verbose:
            cells.append(_found_by(document, lists, queries))
        table.add_row(*cells)
    return table


def print_sources(
    result: dict[str, Any], lists: Sequence[RankedList], *, fusion: str, verbose: bool
) -> None:
    """The queries, a warning per failed retrieval, then the sources table."""
    queries = result.get("queries", [])
    output.print(Text("Queries", style="bold"))
    for number, query in enumerate(queries, 1):
        output.print(Text(f"  {number}. {printable(query)}"), soft_wrap=True)
    for failure in result.get("failures", []):
        message = f"{failure.source} failed for {failure.query!r}: {failure.error}"
        print_line("warning", "yellow", message)
    fused = result.get("documents") or []
    output.print(sources_table(fused, lists=lists, queries=queries, fusion=fusion, verbose=verbose))


def render_answer(chain: Any, question: str, *, fusion: str = "rrf", verbose: bool = False) -> None:
    """Stream a ``return_sources=True`` chain: the sources once the answer, the queries and the
    documents have all arrived (the chunks come in any order), then the answer as it comes."""
    result: dict[str, Any] = {"queries": [], "failures": [], "documents": None}
    retrieved, held = RetrievedLists(), ""
    chunks = iter(chain.stream({"question": question}, {"callbacks": [retrieved]}))
    for chunk in chunks:
        result["queries"] += chunk.get("queries", [])
        result["failures"] += chunk.get("failures", [])
        result["documents"] = chunk.get("documents", result["documents"])
        held += chunk.get("answer", "")
        if held and result["queries"] and result["documents"] is not None:
            break  # retrieval is complete
    print_sources(result, retrieved.lists, fusion=fusion, verbose=verbose)
    output.print(Text("Answer", style="bold"))
    for chunk in itertools.chain([{"answer": held}], chunks):
        answer = printable(chunk.get("answer", ""), keep="\t\n")
        output.print(answer, end="", markup=False, soft_wrap=True)
    output.print()


def json_record(
    result: dict[str, Any], question: str, strategy: str, lists: Sequence[RankedList]
) -> dict[str, Any]:
    """The ``--json`` object: queries, documents with scores and ``hits``, failures, the answer."""
    scores = (FUSION_SCORE_KEY, SCORE_KEY)
    documents = [
        {
            "rank": rank,
            "id": document.id,
            **{key: document.metadata.get(key) for key in scores},
            "metadata": {
                key: value for key, value in document.metadata.items() if key not in scores
            },
            "text": document.page_content,
            "hits": _hits(document, lists),
        }
        for rank, document in enumerate(result["documents"], 1)
    ]
    failures = [
        {"source": failure.source, "query": failure.query, "error": failure.error}
        for failure in result["failures"]
    ]
    record = {"question": question, "strategy": strategy, "queries": list(result["queries"])}
    record |= {"documents": documents, "failures": failures}
    return {**record, "answer": result["answer"]} if "answer" in result else record
