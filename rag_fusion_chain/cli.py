"""The ``rag-fusion`` command: index documents, ask and retrieve with any strategy, demo, serve.

Commands parse their options, call the library and render with rich; nothing here retrieves,
fuses or answers by itself. An index directory (:mod:`rag_fusion_chain.retrievers.index_directory`)
holds ``index.json`` (what built it), the vector store (``faiss/`` or ``chroma/``) and a BM25
index (``bm25/``) for ``--hybrid`` and for the offline query generator. A FAISS index is loaded
only when its signed manifest verifies (made by this user, unchanged), unless ``--trust-index``.

Models come from options or the environment (:mod:`rag_fusion_chain.models`): ``--model`` /
``RAG_FUSION_CHAT_MODEL`` with ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``; ``--embedding`` /
``RAG_FUSION_EMBEDDING``. Without a chat model everything runs offline (:mod:`offline`). Expected
failures (a missing index or file, an unreachable URL, an unknown store or strategy, a model
without its key) end with one ``error:`` line on stderr and exit code 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from langchain_core.documents import Document
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from rag_fusion_chain import __version__, chains, ingest, models, offline, serving
from rag_fusion_chain.data import SAMPLE_QUESTION, sample_corpus_path
from rag_fusion_chain.fusion import FUSION_SCORE_KEY, SCORE_KEY, document_id
from rag_fusion_chain.retrievers.index_directory import (
    INDEX_FILE,
    OpenedIndex,
    build_index,
    open_index,
)
from rag_fusion_chain.retrievers.stores import UntrustedIndexError

DEFAULT_K = 10
"""Documents per retriever call."""
DEMO_CHUNK_SIZE = 1500
"""Tokens per chunk in the demo: one chunk per abstract, so the demo embeds 300 texts, not 600."""

app = typer.Typer(
    name="rag-fusion",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
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


def _print_line(label: str, style: str, message: str) -> None:
    errors.print(Text(f"{label}: ", style=style) + Text(one_line(message)), soft_wrap=True)


def _show_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    _print_line("warning", "yellow", str(message))


def _describe(error: BaseException) -> str:
    """The message for the user: the text of the usual errors, the type name for the others."""
    message = str(error) or type(error).__name__
    usual = (OSError, ValueError, TypeError, ImportError, KeyError, ConnectionError, TimeoutError)
    return message if isinstance(error, usual) else f"{type(error).__name__}: {message}"


@contextlib.contextmanager
def reported_errors() -> Iterator[None]:
    """Turn any error into one ``error:`` line on stderr and exit code 1 (no traceback)."""
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            yield
    except (typer.Exit, typer.Abort):
        raise
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except Exception as error:  # noqa: BLE001 - reported on one line, as the CLI promises
        _print_line("error", "bold red", _describe(error))
        raise typer.Exit(1) from None


def _choice(name: str, value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}: choose one of {', '.join(choices)}")
    return value


# --------------------------------------------------------------------------------------------
# Progress (the index directories themselves are rag_fusion_chain.retrievers.index_directory)
# --------------------------------------------------------------------------------------------


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=errors,
        transient=False,
    )


def _progress_bars(
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


def _write_scores(
    json_path: Path | None, plot: Path | None, dataset: str, scores: dict[str, dict[str, float]]
) -> None:
    """Write the ``{setup: {metric: score}}`` table as JSON and as a plot when asked to."""
    from rag_fusion_chain import evaluate  # the eval extra, imported only by `eval`

    if json_path is not None:
        output.print(f"Wrote {evaluate.write_json(json_path, dataset, scores)}", markup=False)
    if plot is not None:
        output.print(f"Wrote {evaluate.write_plot(plot, dataset, scores)}", markup=False)


def _build_index(sources: Sequence[str], out: Path, **options: Any) -> dict[str, Any]:
    """:func:`build_index` with progress bars on stderr."""
    with _progress() as progress:
        return build_index(sources, out, on_progress=_progress_bars(progress), **options)


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


def _print_queries(queries: Sequence[str]) -> None:
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
            _print_sources(queries, documents, failures)
            started = True
        if started:
            output.print("".join(held), end="", markup=False, soft_wrap=True)
            held.clear()
    if not started:
        _print_sources(queries, documents or [], failures)
    output.print("".join(held), markup=False, soft_wrap=True)


def _print_sources(queries: Sequence[str], documents: Sequence[Document], failures: Any) -> None:
    _print_queries(queries)
    for failure in failures:
        _print_line(
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


# --------------------------------------------------------------------------------------------
# Options shared by the commands
# --------------------------------------------------------------------------------------------

IndexOption = Annotated[
    Path, typer.Option("--index", "-i", help="Index directory written by `rag-fusion index`.")
]
StrategyOption = Annotated[
    str,
    typer.Option(
        "--strategy",
        "-s",
        help=f"Query strategy: {', '.join(offline.STRATEGIES)}.",
    ),
]
HybridOption = Annotated[
    bool, typer.Option("--hybrid", help="Fuse BM25 keyword search with the vector store.")
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="Chat model name (OpenAI-compatible); 'offline' for none. "
        f"Default: ${models.CHAT_MODEL_ENV}, else offline unless ${models.API_KEY_ENV} is set.",
    ),
]
BaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--base-url", help=f"OpenAI-compatible endpoint. Default: ${models.BASE_URL_ENV}."
    ),
]
EmbeddingOption = Annotated[
    str | None,
    typer.Option(
        "--embedding",
        "-e",
        help="Embeddings: minilm, openai:<model>, sentence-transformers:<dir>, modelscope:<dir>. "
        "Default: the index's own.",
    ),
]
CountOption = Annotated[int, typer.Option("--queries", "-n", help="Queries to generate.")]
KOption = Annotated[int, typer.Option("--k", "-k", help="Documents per retriever call.")]
TopOption = Annotated[int, typer.Option("--top-n", help="Fused documents kept.")]
TrustOption = Annotated[
    bool,
    typer.Option(
        "--trust-index",
        help="Load a FAISS index whose signed manifest cannot be verified (made by another "
        "user or machine, or changed since). Its pickle file can run code: only for indexes "
        "you trust.",
    ),
]


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


@app.command()
def index(
    sources: Annotated[
        list[str], typer.Argument(help="Files, folders, BEIR .jsonl corpora or http(s) URLs.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Index directory to write.")],
    store: Annotated[str, typer.Option("--store", help="Vector store: faiss or chroma.")] = "faiss",
    embedding: EmbeddingOption = None,
    chunk_size: Annotated[int, typer.Option(help="Tokens per chunk.")] = ingest.DEFAULT_CHUNK_SIZE,
    chunk_overlap: Annotated[
        int, typer.Option(help="Tokens shared by neighbouring chunks.")
    ] = ingest.DEFAULT_CHUNK_OVERLAP,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing index.")] = False,
) -> None:
    """Load, split and embed SOURCES into a vector store, with a BM25 index beside it."""
    with reported_errors():
        settings = _build_index(
            sources,
            out,
            store=store,
            embedding=embedding,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            force=force,
        )
        output.print(
            f"Indexed {settings['documents']} documents as {settings['chunks']} chunks "
            f"({settings['store']}, embeddings {settings['embedding']}) in {out}",
            markup=False,
            soft_wrap=True,
        )


def _models_and_index(
    model: str | None,
    base_url: str | None,
    directory: Path,
    embedding: str | None,
    trust: bool,
) -> tuple[Any, OpenedIndex]:
    """The chat model (None: offline, said in a note) and the opened index; fails fast."""
    llm = models.chat_model(model, base_url=base_url, streaming=True)
    opened = open_index(directory, embedding, trust=trust)
    if llm is None:
        _print_line(
            "note", "cyan", f"no chat model configured: answers are {offline.OFFLINE_LABEL}"
        )
    return llm, opened


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    index_directory: IndexOption,
    strategy: StrategyOption = chains.RAG_FUSION,
    hybrid: HybridOption = False,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    embedding: EmbeddingOption = None,
    n: CountOption = 4,
    k: KOption = DEFAULT_K,
    top_n: TopOption = chains.DEFAULT_TOP_N,
    trust_index: TrustOption = False,
) -> None:
    """Answer QUESTION: show the queries, the fused sources with scores, then the answer."""
    with reported_errors():
        _choice("strategy", strategy, offline.STRATEGIES)
        llm, opened = _models_and_index(model, base_url, index_directory, embedding, trust_index)
        chain = offline.chain_for(
            strategy,
            opened.retrievers(hybrid, k),
            llm,
            feedback=opened.bm25,
            n=n,
            top_n=top_n,
            return_sources=True,
        )
        render_answer(chain, question)


@app.command()
def retrieve(
    question: Annotated[str, typer.Argument(help="The question.")],
    index_directory: IndexOption,
    strategy: StrategyOption = chains.RAG_FUSION,
    hybrid: HybridOption = False,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    embedding: EmbeddingOption = None,
    n: CountOption = 4,
    k: KOption = DEFAULT_K,
    top_n: TopOption = chains.DEFAULT_TOP_N,
    json_output: Annotated[bool, typer.Option("--json", help="Print plain JSON.")] = False,
    trust_index: TrustOption = False,
) -> None:
    """Retrieve for QUESTION without answering: the queries and the fused documents."""
    with reported_errors():
        _choice("strategy", strategy, offline.STRATEGIES)
        llm = models.chat_model(model, base_url=base_url)
        opened = open_index(index_directory, embedding, trust=trust_index)
        chain = offline.retrieval_chain(
            strategy, opened.retrievers(hybrid, k), llm, feedback=opened.bm25, n=n, top_n=top_n
        )
        state = chain.invoke({"question": question})
        if json_output:
            record = retrieval_record(state, strategy)
            sys.stdout.write(json.dumps(record, ensure_ascii=False, indent=2, default=str) + "\n")
            return
        _print_queries(state["queries"])
        output.print(sources_table(state["documents"]))


def demo_directory() -> Path:
    """Where ``demo --index`` suggests keeping an index: ``$XDG_CACHE_HOME`` (else ``~/.cache``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "rag-fusion-chain" / f"demo-{__version__}"


def _index_sample(directory: Path) -> None:
    """Index the sample into ``directory``, from the shipped vectors when they fit MiniLM."""
    output.print(f"Indexing the SciFact sample into {directory}", markup=False)
    shipped = serving.with_shipped_vectors(models.embeddings(models.DEFAULT_EMBEDDING))
    _build_index(
        [str(sample_corpus_path())],
        directory,
        store="faiss",
        embedding=shipped or models.DEFAULT_EMBEDDING,
        chunk_size=DEMO_CHUNK_SIZE,
        chunk_overlap=0,
        force=True,
    )


def _demo_index(directory: Path | None, rebuild: bool) -> OpenedIndex:
    """The sample in memory from its shipped vectors, or kept in ``directory`` (built once)."""
    if directory is None:
        return serving.open_source(serving.IndexSource(), models.DEFAULT_EMBEDDING)
    if rebuild or not (directory / INDEX_FILE).is_file():
        _index_sample(directory)
    try:
        return open_index(directory, models.DEFAULT_EMBEDDING)
    except UntrustedIndexError:  # made by an older kit, another user, or changed: not loaded
        _print_line("note", "cyan", f"the demo index in {directory} cannot be verified")
        _index_sample(directory)
        return open_index(directory, models.DEFAULT_EMBEDDING)


@app.command()
def demo(
    index_directory: Annotated[
        Path | None,
        typer.Option(
            "--index",
            "-i",
            help="Keep the demo index in this directory. Default: in memory, from the sample's "
            "shipped vectors.",
        ),
    ] = None,
    question: Annotated[str, typer.Option(help="The question to answer.")] = SAMPLE_QUESTION,
    strategy: StrategyOption = chains.RAG_FUSION,
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="Index the sample again (with --index).")
    ] = False,
) -> None:
    """Answer a question offline over the bundled SciFact sample, hybrid search."""
    with reported_errors():
        _choice("strategy", strategy, offline.STRATEGIES)
        opened = _demo_index(index_directory, rebuild)
        output.print(Text("Question: ", style="bold") + Text(question), soft_wrap=True)
        chain = offline.offline_chain(
            strategy,
            opened.retrievers(hybrid=True, k=DEFAULT_K),
            feedback=opened.bm25,
            return_sources=True,
        )
        render_answer(chain, question)


@app.command()
def serve(
    index_directory: Annotated[
        Path | None,
        typer.Option(
            "--index",
            "-i",
            help=f"Index directory written by `rag-fusion index`. Default: ${serving.INDEX_ENV}, "
            "else the bundled sample.",
        ),
    ] = None,
    chroma_url: Annotated[
        str | None,
        typer.Option(
            "--chroma-url",
            help=f"Search a Chroma server (http://host:port) instead. Default: "
            f"${serving.CHROMA_URL_ENV}.",
        ),
    ] = None,
    chroma_collection: Annotated[
        str | None,
        typer.Option(
            "--chroma-collection",
            help=f"The collection on the Chroma server. Default: ${serving.CHROMA_COLLECTION_ENV}, "
            f"else {serving.DEFAULT_COLLECTION}.",
        ),
    ] = None,
    strategy: StrategyOption = chains.RAG_FUSION,
    hybrid: HybridOption = False,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    embedding: EmbeddingOption = None,
    port: Annotated[int, typer.Option("--port", "-p", help="Port on 127.0.0.1.")] = 8000,
    k: KOption = DEFAULT_K,
    top_n: TopOption = chains.DEFAULT_TOP_N,
    trust_index: TrustOption = False,
) -> None:
    """Serve the strategy's chain with LangServe on 127.0.0.1 (/STRATEGY and /STRATEGY/sources)."""
    with reported_errors():
        _choice("strategy", strategy, offline.STRATEGIES)
        try:
            import uvicorn
        except ImportError as error:
            raise ImportError(
                'serving needs uvicorn: pip install "rag-fusion-chain[serve]"'
            ) from error
        source = serving.IndexSource.from_environment(
            index=index_directory, chroma_url=chroma_url, chroma_collection=chroma_collection
        )
        llm = models.chat_model(model, base_url=base_url, streaming=True)
        opened = serving.open_source(source, embedding, trust=trust_index)
        if llm is None:
            _print_line(
                "note", "cyan", f"no chat model configured: answers are {offline.OFFLINE_LABEL}"
            )
        retrievers = opened.retrievers(hybrid, k)
        routes = {
            path: serving.build_chain(
                strategy,
                return_sources=return_sources,
                chain=offline.chain_for(
                    strategy,
                    retrievers,
                    llm,
                    feedback=opened.bm25,
                    top_n=top_n,
                    return_sources=return_sources,
                ),
            )
            for path, return_sources in ((strategy, False), (f"{strategy}/sources", True))
        }
        server = serving.create_app(routes)
        output.print(
            f"Serving {strategy} over {source.describe()} on http://127.0.0.1:{port}/{strategy} "
            f"(playground: /{strategy}/playground/, with sources: /{strategy}/sources)",
            markup=False,
            soft_wrap=True,
        )
        uvicorn.run(server, host="127.0.0.1", port=port, log_level="warning")


@app.command("eval")
def eval_dataset(
    dataset_dir: Annotated[
        Path, typer.Argument(help="BEIR layout: corpus.jsonl, queries.jsonl, qrels/.")
    ],
    setups: Annotated[
        str,
        typer.Option(
            help="Comma-separated: bm25, dense, hybrid-rrf, hybrid-relative, hybrid-dist, a "
            "strategy (rag-fusion, multi-query, ...; needs a chat model) or STRATEGY-offline. "
            "The first is the baseline of the significance tests."
        ),
    ] = "bm25,dense,hybrid-rrf,hybrid-relative,hybrid-dist",
    split: Annotated[str, typer.Option(help="Qrels split: qrels/SPLIT.tsv.")] = "test",
    queries_limit: Annotated[
        int | None, typer.Option("--queries-limit", help="Evaluate the first N queries only.")
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the scores as JSON.")
    ] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a bar chart (PNG).")] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Embedding cache. Default: ~/.cache/rag-fusion-chain.")
    ] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not cache embeddings.")] = False,
    stat_test: Annotated[str, typer.Option(help="Paired test: student or fisher.")] = "student",
    max_p: Annotated[float, typer.Option(help="Significance level.")] = 0.05,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    embedding: EmbeddingOption = None,
    n: CountOption = 4,
    langsmith: Annotated[
        bool,
        typer.Option(
            "--langsmith",
            help="Run each setup as a LangSmith experiment (needs LANGSMITH_API_KEY; "
            "LANGSMITH_ENDPOINT optional); evaluates locally when LangSmith is not configured.",
        ),
    ] = False,
) -> None:
    """Evaluate retrieval setups on a BEIR dataset: nDCG@10, Recall@100, MRR@10, MAP (ranx)."""
    with reported_errors():
        from rag_fusion_chain import evaluate

        names = [name.strip() for name in setups.split(",") if name.strip()]
        llm = models.chat_model(model, base_url=base_url)
        cache = None if no_cache else (cache_dir or evaluate.DEFAULT_CACHE_DIR)
        if langsmith and evaluate.langsmith_configured():
            with _progress() as progress:
                dataset, experiments = evaluate.run_langsmith_experiments(
                    dataset_dir,
                    names,
                    split=split,
                    queries_limit=queries_limit,
                    llm=llm,
                    embeddings=embedding,
                    cache_dir=cache,
                    query_count=n,
                    progress=_progress_bars(progress, "completed"),
                )
            scores = {experiment.setup: experiment.scores for experiment in experiments}
            table = Table(
                title=f"{dataset.name} ({dataset.split}, {len(dataset.queries)} queries), "
                "LangSmith experiments"
            )
            table.add_column("setup", justify="left")
            for metric in evaluate.DEFAULT_METRICS:
                table.add_column(metric, justify="right")
            table.add_column("experiment", justify="left")
            for experiment in experiments:
                table.add_row(
                    experiment.setup,
                    *(f"{experiment.scores[metric]:.4f}" for metric in evaluate.DEFAULT_METRICS),
                    experiment.experiment_name,
                )
            output.print(table)
            for experiment in experiments:
                where = experiment.url or f"dataset {experiment.dataset_name}"
                output.print(
                    f"{experiment.setup}: {experiment.experiment_name} at {where}",
                    markup=False,
                    soft_wrap=True,
                )
            _write_scores(json_path, plot, dataset.name, scores)
            return
        if langsmith:
            output.print(
                "LangSmith is not configured (LANGSMITH_API_KEY); evaluated locally", markup=False
            )
        with _progress() as progress:
            evaluation = evaluate.run_experiment(
                dataset_dir,
                names,
                split=split,
                queries_limit=queries_limit,
                llm=llm,
                embeddings=embedding,
                cache_dir=cache,
                query_count=n,
                stat_test=stat_test,
                max_p=max_p,
                progress=_progress_bars(progress, "completed"),
            )
        headers, rows = evaluate.comparison_table(evaluation.comparison)
        table = Table(
            title=f"{evaluation.dataset} ({evaluation.split}, {evaluation.query_count} queries)",
            caption=f"p: paired {stat_test} test against {evaluation.comparison.baseline}; "
            f"* p < {max_p}",
        )
        for header in headers:
            table.add_column(header, justify="left" if header == "setup" else "right")
        for row in rows:
            table.add_row(*row)
        output.print(table)
        _write_scores(json_path, plot, evaluation.dataset, evaluation.scores)


@app.callback()
def settings() -> None:
    """Query transformation and result fusion for retrieval-augmented generation."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # model loading stays quiet


def main() -> None:
    """The console-script entry point."""
    app()


if __name__ == "__main__":
    main()
