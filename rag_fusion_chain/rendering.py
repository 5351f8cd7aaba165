"""What the command line shows: error and warning lines, progress bars, the sources table,
the streamed answer and the ``--json`` records.

Everything prints through two rich consoles, :data:`output` (stdout) and :data:`errors`
(stderr), so tests can swap them; nothing here retrieves or answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import PurePath
from typing import Any, Literal
from uuid import UUID

import typer
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from rag_fusion_chain import models
from rag_fusion_chain.fusion import FUSION_SCORE_KEY, SCORE_KEY, document_id

output = Console(highlight=False)
errors = Console(stderr=True, highlight=False)

# --------------------------------------------------------------------------------------------
# Errors and warnings: one line each, on stderr, secrets redacted
# --------------------------------------------------------------------------------------------


def one_line(message: str) -> str:
    """``message`` on one line, with the API key from the environment (if any) redacted.

    >>> one_line("bad\\n  request")
    'bad request'
    """
    text = " ".join(str(message).split())
    secret = os.environ.get(models.API_KEY_ENV)
    return text.replace(secret, "***") if secret else text


def print_line(label: str, style: str, message: str) -> None:
    errors.print(Text(f"{label}: ", style=style) + Text(one_line(message)), soft_wrap=True)


def show_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    print_line("warning", "yellow", str(message))


_KEYWORD_FLAGS = {"force": "--force", "trust": "--trust-index"}
_PASS_KEYWORD = re.compile(r"\bpass (force|trust)=True(?: \([^)]*\))?")
_KEYWORD = re.compile(r"\b(force|trust)=True\b")
_PARAMETER_PREFIXES = {"sources_or_documents:": "SOURCES:", "setups:": "--setups:"}


def command_line_words(message: str) -> str:
    """A library message in the command line's words: flags where it names keyword arguments.

    >>> command_line_words("an index exists in out; pass force=True (rag-fusion index --force)")
    'an index exists in out; add --force'
    >>> command_line_words("sources_or_documents: no documents were loaded")
    'SOURCES: no documents were loaded'
    """
    message = _PASS_KEYWORD.sub(lambda match: "add " + _KEYWORD_FLAGS[match[1]], message)
    message = _KEYWORD.sub(lambda match: _KEYWORD_FLAGS[match[1]], message)
    for prefix, flag in _PARAMETER_PREFIXES.items():
        if message.startswith(prefix):
            message = flag + message.removeprefix(prefix)
    return message


def describe(error: BaseException) -> str:
    """The message for the user: the text of the usual errors (in the command line's words),
    the type name for the others, one ``field: problem`` per pydantic error (no dump)."""
    if isinstance(error, ValidationError):
        return "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'value'}: {problem['msg']}"
            for problem in error.errors()
        )
    message = command_line_words(str(error)) or type(error).__name__
    usual = (OSError, ValueError, TypeError, ImportError, KeyError, ConnectionError, TimeoutError)
    return message if isinstance(error, usual) else f"{type(error).__name__}: {message}"


@contextlib.contextmanager
def reported_errors() -> Iterator[None]:
    """Turn any error into one ``error:`` line on stderr and exit code 1 (no traceback); Ctrl-C
    into one ``interrupted:`` line and exit code 130."""
    try:
        with warnings.catch_warnings():
            warnings.showwarning = show_warning
            yield
    except (typer.Exit, typer.Abort):
        raise
    except KeyboardInterrupt:
        print_line("interrupted", "yellow", "stopped by Ctrl-C")
        raise typer.Exit(130) from None
    except Exception as error:  # noqa: BLE001 - reported on one line, as the CLI promises
        print_line("error", "bold red", describe(error))
        raise typer.Exit(1) from None


# --------------------------------------------------------------------------------------------
# Progress (the index directories themselves are rag_fusion_chain.retrievers.index_directory)
# --------------------------------------------------------------------------------------------


def progress_display() -> Progress:
    return Progress(
        TextColumn("{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=errors,
        transient=False,
    )


def progress_bars(
    progress: Progress, counts: Literal["advance", "completed"] = "advance"
) -> Callable[[str, int, int], None]:
    """A progress callback ``(task, count, total)`` drawing one bar per task; ``count`` is a step
    (``build_index``) or, with ``counts="completed"``, the total done so far (evaluation)."""
    tasks: dict[str, Any] = {}

    def report(task: str, count: int, total: int) -> None:
        if task not in tasks:
            tasks[task] = progress.add_task(task, total=total)
        if counts == "advance":
            progress.update(tasks[task], total=total, advance=count)
        else:
            progress.update(tasks[task], total=total, completed=count)

    return report


# --------------------------------------------------------------------------------------------
# Text from documents and models: shown, never interpreted by the terminal
# --------------------------------------------------------------------------------------------

_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, screen clearing
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks
    r"|\x1b[@-Z\\-_]"  # other two-character escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # the one-byte CSI
)
_UNSAFE_CHARACTER = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
"""Control characters (tab and newline excepted) and the bidirectional-text controls."""


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    r"""``text`` safe to print: escape sequences removed, other control and bidi characters shown
    as ``\xNN`` / ``\uNNNN`` so that a document cannot recolour, move or reorder the output.

    >>> printable("\x1b[31mred\x1b[0m \u202eevil")
    'red \\u202eevil'
    """
    return _UNSAFE_CHARACTER.sub(_escaped, _ESCAPE_SEQUENCE.sub("", text))


def json_text(record: Any) -> str:
    r"""``record`` as indented JSON whose text has no raw control or bidi character.

    JSON already escapes C0 controls; the C1 and bidi controls are escaped too (``\u202e``),
    which decodes to the same value.

    >>> json_text(["a\u202eb"]).split()
    ['[', '"a\\u202eb"', ']']
    """
    dumped = json.dumps(record, ensure_ascii=False, indent=2, default=str)
    return _UNSAFE_CHARACTER.sub(lambda match: f"\\u{ord(match.group()):04x}", dumped)


# --------------------------------------------------------------------------------------------
# Where the fused documents came from
# --------------------------------------------------------------------------------------------


RETRIEVAL_RUN_NAMES = frozenset({"retrieve", "fan_out"})
"""Runs whose list output is ranked lists: a chain's fan-out, or a ``MultiRetriever``."""


class RetrievedLists(BaseCallbackHandler):
    """Collects the ranked lists a chain fused, from its outermost retrieval runs.

    The ready chains return the fused documents only; the lists (one per query and retriever,
    each knowing its query and source) say where each document was found and how often. A
    retriever that fuses lists of its own (the hybrid one) runs a retrieval inside; its inner
    lists were fused into the one it returned, so they are not counted again.
    Pass it in the config: ``chain.invoke(question, {"callbacks": [lists]})``.
    """

    def __init__(self) -> None:
        self._found: dict[UUID, list[Any]] = {}
        self._parents: dict[UUID, UUID | None] = {}
        self._retrievals: set[UUID] = set()

    @property
    def lists(self) -> list[Any]:
        """The ranked lists of retrieval runs that ran inside no other retrieval run."""
        return [
            ranked
            for run_id, found in self._found.items()
            if not self._inside_another(run_id)
            for ranked in found
        ]

    def _inside_another(self, run_id: UUID) -> bool:
        parent = self._parents.get(run_id)
        while parent is not None:
            if parent in self._found:
                return True
            parent = self._parents.get(parent)
        return False

    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        name: str | None = None,
        **_: Any,
    ) -> None:
        self._parents[run_id] = parent_run_id
        if name in RETRIEVAL_RUN_NAMES:
            self._retrievals.add(run_id)

    def on_retriever_start(
        self,
        serialized: Any,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **_: Any,
    ) -> None:
        self._parents[run_id] = parent_run_id

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **_: Any) -> None:
        if run_id in self._retrievals and isinstance(outputs, list):
            self._found[run_id] = [ranked for ranked in outputs if isinstance(ranked, list)]


def _hits(document: Document, retrieved: Sequence[Any]) -> list[dict[str, Any]]:
    """Where the document was found: one entry per ranked list holding it."""
    key = document_id(document)
    return [
        {
            "query": getattr(ranked, "query", None),
            "retriever": getattr(ranked, "source", None),
            "rank": rank,
            # a fusing retriever's list (hybrid) is ranked by its fused score, not the first
            # appearance's own score that its documents carry too
            "score": hit.metadata.get(FUSION_SCORE_KEY, hit.metadata.get(SCORE_KEY)),
        }
        for ranked in retrieved
        for rank, hit in enumerate(ranked, 1)
        if document_id(hit) == key
    ]


# --------------------------------------------------------------------------------------------
# The sources table
# --------------------------------------------------------------------------------------------

TITLE_CHARACTERS = 100
EXCERPT_CHARACTERS = 200
"""Text shown per source: rich wraps it to the terminal, so 80 columns show a few lines each."""
_HEADING = re.compile(r"#{1,6}[ \t]+([^\n]+)")


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _heading(text: str) -> str | None:
    """The markdown heading the text starts with, if any."""
    match = _HEADING.match(text)
    return " ".join(match[1].split()) if match else None


def title_of(document: Document) -> str:
    r"""The document's title; else its leading markdown heading and its file; else its file's
    last two path parts (or URL); else its id.

    >>> title_of(Document("# Boilers\nGas boilers burn gas.", metadata={"source": "/a/b/c.md"}))
    'Boilers (b/c.md)'
    """
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


def excerpt_of(document: Document) -> str:
    r"""The start of the document's text on one line, without the heading or title it starts
    with (markdown files and BEIR chunks repeat their title), so the excerpt adds to the title.

    >>> excerpt_of(Document("# Heat pumps\n\nThey move heat."))
    'They move heat.'
    >>> excerpt_of(Document("Heat pumps\nThey move heat.", metadata={"title": "Heat pumps"}))
    'They move heat.'
    """
    text = document.page_content.lstrip()
    if _heading(text) is not None:
        text = text.partition("\n")[2]
    text = " ".join(text.split())
    title = " ".join(str(document.metadata.get("title") or "").split())
    if title and text.casefold().startswith(title.casefold()):
        text = text[len(title) :].lstrip(" .:;-–—")
    return text


def _fused_score(document: Document, fusion: str, list_count: int) -> str:
    value = document.metadata.get(FUSION_SCORE_KEY)
    if not isinstance(value, (int, float)):
        return "–"
    if fusion == "union":
        return f"{value:g}/{list_count}" if list_count else f"{value:g}"
    return f"{value:.4f}"


def score_explanation(fusion: str, list_count: int) -> str:
    """The caption explaining the table's score column for a fusion (``rrf`` or ``union``)."""
    lists = f"the {list_count} ranked lists" if list_count else "the ranked lists"
    if fusion == "union":
        return f"found in: how many of {lists} (one per query and retriever) returned the passage"
    return (
        f"RRF: reciprocal rank fusion, the sum of 1/(60 + rank) over {lists} (one per query "
        "and retriever) holding the passage; rows in fused order"
    )


def _found_by(document: Document, lists: Sequence[Any], queries: Sequence[str]) -> Text:
    """One line per list holding the document: query number, retriever, rank, its own score."""
    lines = []
    for hit in _hits(document, lists):
        query = hit["query"]
        number = queries.index(query) + 1 if query in queries else "?"
        score = hit["score"]
        own = f" {score:.3g}" if isinstance(score, (int, float)) else ""
        lines.append(f"q{number} {printable(str(hit['retriever']))} #{hit['rank']}{own}")
    return Text("\n".join(lines))


def sources_table(
    documents: Sequence[Document],
    *,
    lists: Sequence[Any] = (),
    queries: Sequence[str] = (),
    fusion: str = "rrf",
    verbose: bool = False,
) -> Table:
    """The fused documents in fused order, numbered as the answer cites them, with one fused
    score column explained in the caption.

    ``lists`` are the ranked lists that were fused (:class:`RetrievedLists`): their count
    explains the score, and with ``verbose`` each row shows the lists holding the document
    (query number, retriever, rank and the retriever's own score) and the document's id.
    """
    table = Table(
        title="Fused sources",
        title_justify="left",
        caption=score_explanation(fusion, len(lists)),
        caption_justify="left",
    )
    table.add_column("#", justify="right")
    table.add_column("title / source", ratio=1, min_width=12)
    table.add_column("excerpt", ratio=2, min_width=20)
    table.add_column("found in" if fusion == "union" else "RRF", justify="right", no_wrap=True)
    if verbose:
        table.add_column("id / found by (query, retriever, rank, score)", ratio=1)
    for number, document in enumerate(documents, 1):
        cells: list[Any] = [
            str(number),
            Text(printable(_shortened(title_of(document), TITLE_CHARACTERS))),
            Text(printable(_shortened(excerpt_of(document), EXCERPT_CHARACTERS))),
            _fused_score(document, fusion, len(lists)),
        ]
        if verbose:
            cells.append(
                Text(printable(str(document.id or "")) + "\n", overflow="fold")
                + _found_by(document, lists, queries)
            )
        table.add_row(*cells)
    return table


# --------------------------------------------------------------------------------------------
# Queries and the streamed answer
# --------------------------------------------------------------------------------------------


def print_queries(queries: Sequence[str]) -> None:
    output.print(Text("Queries", style="bold"))
    for number, query in enumerate(queries, 1):
        output.print(Text(f"  {number}. ") + Text(printable(query)), soft_wrap=True)


def render_answer(chain: Any, question: str, *, fusion: str = "rrf", verbose: bool = False) -> None:
    """Stream a chain built with ``return_sources=True``: queries, the sources table, the answer.

    The chain streams dict chunks whose keys arrive in any order (queries one by one or at once,
    the documents at once, the answer token by token, concurrently); the queries and sources are
    shown once the answer has started and both have arrived (retrieval is then complete), and the
    answer is streamed after them.
    """
    queries: list[str] = []
    documents: list[Document] | None = None
    failures: list[Any] = []
    held: list[str] = []
    started = False
    retrieved = RetrievedLists()
    for chunk in chain.stream({"question": question}, {"callbacks": [retrieved]}):
        queries.extend(chunk.get("queries", []))
        documents = chunk.get("documents", documents)
        failures.extend(chunk.get("failures", []))
        held.append(chunk.get("answer", ""))
        if not started and documents is not None and queries and any(held):
            print_sources(
                queries, documents, failures, retrieved.lists, fusion=fusion, verbose=verbose
            )
            started = True
        if started:
            output.print(printable("".join(held)), end="", markup=False, soft_wrap=True)
            held.clear()
    if not started:
        print_sources(
            queries, documents or [], failures, retrieved.lists, fusion=fusion, verbose=verbose
        )
    output.print(printable("".join(held)), markup=False, soft_wrap=True)


def print_sources(
    queries: Sequence[str],
    documents: Sequence[Document],
    failures: Any,
    lists: Sequence[Any] = (),
    *,
    fusion: str = "rrf",
    verbose: bool = False,
) -> None:
    """The queries, a warning per failed retrieval, the sources table and the answer heading."""
    print_queries(queries)
    for failure in failures:
        print_line(
            "warning", "yellow", f"{failure.source} failed for {failure.query!r}: {failure.error}"
        )
    output.print(
        sources_table(documents, lists=lists, queries=queries, fusion=fusion, verbose=verbose)
    )
    output.print(Text("Answer", style="bold"))


# --------------------------------------------------------------------------------------------
# --json records
# --------------------------------------------------------------------------------------------


def _document_record(rank: int, document: Document, lists: Sequence[Any]) -> dict[str, Any]:
    return {
        "rank": rank,
        "id": document.id,
        "fusion_score": document.metadata.get(FUSION_SCORE_KEY),
        "score": document.metadata.get(SCORE_KEY),
        "metadata": {
            key: value
            for key, value in document.metadata.items()
            if key not in (FUSION_SCORE_KEY, SCORE_KEY)
        },
        "text": document.page_content,
        "hits": _hits(document, lists),
    }


def retrieval_record(state: dict[str, Any], strategy: str) -> dict[str, Any]:
    """The ``retrieve --json`` output: queries, fused documents with ids and scores (``hits``:
    every ranked list holding the document, with its rank and the retriever's score), failures."""
    return {
        "question": state["question"],
        "strategy": strategy,
        "queries": list(state["queries"]),
        "documents": [
            _document_record(rank, document, state["retrieved"])
            for rank, document in enumerate(state["documents"], 1)
        ],
        "failures": [vars(failure) for failure in state["failures"]],
    }


def answer_record(
    result: dict[str, Any], question: str, strategy: str, lists: Sequence[Any] = ()
) -> dict[str, Any]:
    """The ``ask --json`` output: :func:`retrieval_record`'s fields and the answer.

    ``result`` is a ``return_sources=True`` chain's output; ``lists`` the ranked lists it fused
    (:class:`RetrievedLists`), for each document's ``hits``.
    """
    state = {**result, "question": question, "retrieved": lists}
    return {**retrieval_record(state, strategy), "answer": result["answer"]}


def scores_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, title: str, caption: str | None = None
) -> Table:
    """An evaluation table: text columns (``setup``, ``experiment``) left, scores right."""
    table = Table(title=title, caption=caption)
    for header in headers:
        table.add_column(header, justify="left" if header in ("setup", "experiment") else "right")
    for row in rows:
        table.add_row(*row)
    return table
