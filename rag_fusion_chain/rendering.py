"""What the command line shows: error and warning lines, progress bars, the sources table,
the streamed answer and the ``--json`` records.

Everything prints through two rich consoles, :data:`output` (stdout) and :data:`errors`
(stderr), so tests can swap them; nothing here retrieves or answers.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import typer
from langchain_core.documents import Document
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


def describe(error: BaseException) -> str:
    """The message for the user: the text of the usual errors, the type name for the others."""
    message = str(error) or type(error).__name__
    usual = (OSError, ValueError, TypeError, ImportError, KeyError, ConnectionError, TimeoutError)
    return message if isinstance(error, usual) else f"{type(error).__name__}: {message}"


@contextlib.contextmanager
def reported_errors() -> Iterator[None]:
    """Turn any error into one ``error:`` line on stderr and exit code 1 (no traceback)."""
    try:
        with warnings.catch_warnings():
            warnings.showwarning = show_warning
            yield
    except (typer.Exit, typer.Abort):
        raise
    except KeyboardInterrupt:
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
# Rendering
# --------------------------------------------------------------------------------------------


def _label(document: Document) -> str:
    title = document.metadata.get("title") or document.metadata.get("source") or ""
    return str(title)


def _one_line_cell(text: str) -> Text:
    return Text(text, no_wrap=True, overflow="ellipsis")


def _number(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "–"


def sources_table(documents: Sequence[Document]) -> Table:
    """The fused documents, numbered as the answer cites them, one line each, with their scores.

    ``fusion`` is the fused score; ``score`` the retriever's own score where the document was
    first found (BM25 and cosine scores are not on one scale).
    """
    table = Table(title="Fused sources", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("id", max_width=24)
    table.add_column("fusion", justify="right")
    table.add_column("score", justify="right")
    table.add_column("title / source", max_width=40)
    table.add_column("excerpt")
    for number, document in enumerate(documents, 1):
        table.add_row(
            str(number),
            _one_line_cell(str(document.id or "")),
            _number(document.metadata.get(FUSION_SCORE_KEY)),
            _number(document.metadata.get(SCORE_KEY)),
            _one_line_cell(_label(document)),
            _one_line_cell(" ".join(document.page_content.split())),
        )
    return table


def print_queries(queries: Sequence[str]) -> None:
    output.print(Text("Queries", style="bold"))
    for number, query in enumerate(queries, 1):
        output.print(Text(f"  {number}. ") + Text(query), soft_wrap=True)


def render_answer(chain: Any, question: str) -> None:
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
    for chunk in chain.stream({"question": question}):
        queries.extend(chunk.get("queries", []))
        documents = chunk.get("documents", documents)
        failures.extend(chunk.get("failures", []))
        held.append(chunk.get("answer", ""))
        if not started and documents is not None and queries and any(held):
            print_sources(queries, documents, failures)
            started = True
        if started:
            output.print("".join(held), end="", markup=False, soft_wrap=True)
            held.clear()
    if not started:
        print_sources(queries, documents or [], failures)
    output.print("".join(held), markup=False, soft_wrap=True)


def print_sources(queries: Sequence[str], documents: Sequence[Document], failures: Any) -> None:
    print_queries(queries)
    for failure in failures:
        print_line(
            "warning", "yellow", f"{failure.source} failed for {failure.query!r}: {failure.error}"
        )
    output.print(sources_table(documents))
    output.print(Text("Answer", style="bold"))


def _hits(document: Document, retrieved: Sequence[Any]) -> list[dict[str, Any]]:
    """Where the document was found: one entry per ranked list holding it."""
    key = document_id(document)
    return [
        {
            "query": ranked.query,
            "retriever": ranked.source,
            "rank": rank,
            "score": hit.metadata.get(SCORE_KEY),
        }
        for ranked in retrieved
        for rank, hit in enumerate(ranked, 1)
        if document_id(hit) == key
    ]


def retrieval_record(state: dict[str, Any], strategy: str) -> dict[str, Any]:
    """The ``retrieve --json`` output: queries, fused documents with ids and scores, failures."""
    return {
        "question": state["question"],
        "strategy": strategy,
        "queries": list(state["queries"]),
        "documents": [
            {
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
                "hits": _hits(document, state["retrieved"]),
            }
            for rank, document in enumerate(state["documents"], 1)
        ],
        "failures": [vars(failure) for failure in state["failures"]],
    }
