"""The ``rag-fusion`` command: parse the options, call the library, render with rich; every
expected failure is one ``error:`` line and exit code 1, arguments are checked before anything loads."""

from __future__ import annotations

import os
import socket
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from rag_fusion_chain import chains, evaluate, ingest, models, offline, serving, strategies
from rag_fusion_chain._version import __version__
from rag_fusion_chain.data import SAMPLE_QUESTION, sample_corpus_path
from rag_fusion_chain.evaluate.setups import DEFAULT_SETUPS
from rag_fusion_chain.fusion import UniqueUnion
from rag_fusion_chain.rendering import (
    RetrievedLists,
    json_record,
    json_text,
    output,
    print_line,
    print_sources,
    progress_display,
    render_answer,
    reported_errors,
    say,
)
from rag_fusion_chain.retrievers.index_directory import (
    INDEX_FILE,
    RECORDED,
    build_index,
    open_index,
    read_settings,
)
from rag_fusion_chain.retrievers.signing import UntrustedIndexError
from rag_fusion_chain.validation import KIT_CACHE, MAX_QUERIES, counted, question_of, require_extra

COMMAND_LINE_K = 10  # --k: each retriever's documents per query (the kit's retrievers alone: 5)
DEMO_CHUNK_SIZE = 1500
"""Tokens per chunk in the demo: one chunk per abstract (300 texts to embed, not 600)."""

app = typer.Typer(
    name="rag-fusion",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: flags read "--hybrid / --no-hybrid", not "<bool>"
)


def _check(question: str | None, strategy: str, index: Path | None = None) -> None:
    """Refuse an empty or over-long question, an unknown strategy or a missing index at once."""
    if question is not None:
        question_of(question)  # the chains' own checks: not empty, its length and encoding
    strategies.get(strategy)  # the registry's ValueError, naming the strategies
    if index is not None and not (index / INDEX_FILE).exists():  # not a file: open_index says
        raise FileNotFoundError(
            f"no index in {index}: build one with `rag-fusion index SOURCE... --out {index}`"
        )


def _build_index(sources: Sequence[str], out: Path, **options: Any) -> dict[str, Any]:
    """:func:`build_index` with progress bars on stderr."""
    with progress_display() as report:
        return build_index(sources, out, on_progress=report, **options)


def _note_offline(llm: Any) -> None:
    if llm is None:
        print_line("note", "cyan", f"no chat model configured: answers are {offline.OFFLINE_LABEL}")


def _fusion_shown(strategy: str) -> str:
    """How the strategy's fused score reads: lists counted (union), RRF, or one question's RRF."""
    record = strategies.get(strategy)
    union = isinstance(record.default_fusion, UniqueUnion)
    return "union" if union else "rrf" if record.grouping == "flat" else "grouped"


_EMBEDDINGS = "minilm, minilm-torch, minilm-openvino, minilm-f32, minilm-bf16, openai:<model>, sentence-transformers:<dir>, modelscope:<dir>"
_HELP = {
    "index": "Index directory written by `rag-fusion index`.",
    "strategy": f"Query strategy: {', '.join(strategies.STRATEGIES)}.",
    "json": "Print one JSON object on stdout instead of tables.",
    "model": f"Chat model name (OpenAI-compatible); 'offline' for none. Default: ${models.CHAT_MODEL_ENV}, else offline unless ${models.API_KEY_ENV} is set.",
    "base_url": f"OpenAI-compatible endpoint. Default: ${models.BASE_URL_ENV}.",
    "embedding": f"Embeddings for the queries: {_EMBEDDINGS}. Default: the ones the index was built with.",
    "new": f"Embeddings: {_EMBEDDINGS}. Default: ${models.EMBEDDING_ENV}, else {models.DEFAULT_EMBEDDING}.",
    "verbose": "Show each source's id and every ranked list that found it (query, retriever, rank, the retriever's own score).",
    "trust": "Load an index whose signatures (index.json, the FAISS manifest) cannot be verified (made by another user or machine, or changed since). A FAISS pickle (LangChain save_local, older kits) is still read through the allow-list of data classes: only for indexes you trust.",
    "demo_index": "Keep the demo index in this directory: a new or empty one, or the demo's own index. Default: in memory, from the sample's shipped vectors.",
    "rebuild": "Index the sample again (with --index).",
    "serve_index": f"Index directory written by `rag-fusion index`. Default: ${serving.INDEX_ENV}, else the bundled sample.",
    "chroma_url": f"Search a Chroma server (http://host:port) instead. Default: ${serving.CHROMA_URL_ENV}.",
    "chroma_collection": f"The collection on the Chroma server. Default: ${serving.CHROMA_COLLECTION_ENV}, else {serving.DEFAULT_COLLECTION}.",
    "port": "Port on 127.0.0.1.",
    "queries": "Queries to generate (default: the strategy's).",
    "top_n": f"Fused documents kept. Default: the strategy's ({strategies.DEFAULT_TOP_N}; multi-query keeps them all).",
    "allow_host": "Also answer requests for this Host name (repeatable; loopback names always).",
    "dataset": "A BEIR dataset folder: corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv (the layout of the BEIR benchmark's zip files, e.g. scifact.zip, unzipped).",
    "setups": "Comma-separated: bm25, dense, hybrid-rrf, hybrid-relative, hybrid-dist, a strategy (rag-fusion, multi-query, ...; needs a chat model) or STRATEGY-offline. The first is the baseline of the significance tests.",
    "limit": "Evaluate the first N queries only.",
    "json_out": "Write the scores as JSON.",
    "cache": f"Embedding cache. Default: {KIT_CACHE / 'embeddings'}.",
    "store": "Vector store: faiss (default) or chroma.",
    "sources": "Files, folders, BEIR .jsonl corpora or http(s) URLs.",
    "out": "Index directory to write.",
    "chunk_size": f"Tokens per chunk (default {ingest.DEFAULT_CHUNK_SIZE}).",
    "chunk_overlap": f"Tokens shared by neighbouring chunks (default {ingest.DEFAULT_CHUNK_OVERLAP}).",
    "update": "Update an existing index: embed only new and changed sources, drop deleted ones and any not given again (SOURCES are the whole index). Store, embeddings, chunking and FAISS index not given are those the index records; giving others is an error (--force rebuilds with them).",
    "faiss_index": "FAISS index type: flat (exact, default), hnsw, ivfpq, or an index_factory string.",
    "strict": "Fail on the first file or URL that cannot be used, instead of skipping it.",
    "follow_symlinks": "Follow links that point out of a folder (by default they are skipped).",
    "deny_private": f"Refuse URLs on private or local addresses, or allow them. Default: allowed, unless {ingest.DENY_PRIVATE_ENV}=1.",
    "langsmith": "Run each setup as a LangSmith experiment (needs LANGSMITH_API_KEY; LANGSMITH_ENDPOINT optional); evaluates locally when LangSmith is not configured.",
}
"""The option help texts too long to sit beside their option."""

StrategyOption = Annotated[str, typer.Option("--strategy", "-s", help=_HELP["strategy"])]
HybridOption = Annotated[bool, typer.Option(help="Fuse BM25 keyword search with the vector store.")]
ModelOption = Annotated[str | None, typer.Option("--model", "-m", help=_HELP["model"])]
BaseUrlOption = Annotated[str | None, typer.Option("--base-url", help=_HELP["base_url"])]
EmbeddingOption = Annotated[str | None, typer.Option("--embedding", "-e", help=_HELP["embedding"])]
NewEmbeddingOption = Annotated[str | None, typer.Option("--embedding", "-e", help=_HELP["new"])]
StrategyCountOption = Annotated[
    int | None,
    typer.Option("--queries", "-n", min=1, max=MAX_QUERIES, help=_HELP["queries"]),
]
KOption = Annotated[int, typer.Option("--k", "-k", min=1, help="Documents per retriever call.")]
TopOption = Annotated[int | None, typer.Option("--top-n", min=1, help=_HELP["top_n"])]
TrustOption = Annotated[bool, typer.Option("--trust-index", help=_HELP["trust"])]


@app.command()
def index(
    sources: Annotated[list[str], typer.Argument(help=_HELP["sources"])],
    out: Annotated[Path, typer.Option("--out", "-o", file_okay=False, help=_HELP["out"])],
    store: Annotated[str | None, typer.Option(help=_HELP["store"])] = None,
    embedding: NewEmbeddingOption = None,
    chunk_size: Annotated[int | None, typer.Option(min=1, help=_HELP["chunk_size"])] = None,
    chunk_overlap: Annotated[int | None, typer.Option(min=0, help=_HELP["chunk_overlap"])] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing index.")] = False,
    update: Annotated[bool, typer.Option("--update", help=_HELP["update"])] = False,
    faiss_index: Annotated[str | None, typer.Option(help=_HELP["faiss_index"])] = None,
    strict: Annotated[bool, typer.Option(help=_HELP["strict"])] = False,
    follow_symlinks: Annotated[bool, typer.Option(help=_HELP["follow_symlinks"])] = False,
    max_file_size: Annotated[
        float, typer.Option(min=0.001, help="Skip files larger than this, in megabytes.")
    ] = ingest.DEFAULT_MAX_FILE_SIZE / 1_000_000,
    deny_private: Annotated[
        bool | None, typer.Option("--deny-private/--allow-private", help=_HELP["deny_private"])
    ] = None,
) -> None:
    """Load, split and embed SOURCES. A BM25 index is kept beside the vectors.

    Files and URLs that cannot be read are skipped and listed at the end.
    """
    with reported_errors():
        warnings.filterwarnings("ignore", category=ingest.SkippedSourceWarning)  # summarised
        settings = _build_index(
            sources,
            out,
            store=store,
            faiss_index=faiss_index,
            update=update,
            embedding=embedding,
            chunk_size=RECORDED if chunk_size is None else chunk_size,
            chunk_overlap=chunk_overlap,
            force=force,
            load_options={
                "strict": strict,
                "follow_symlinks": follow_symlinks,
                "max_file_size": max(1, round(max_file_size * 1_000_000)),
                "deny_private": deny_private,
            },
        )
        read = counted(settings["files"], "source")  # files or URLs
        say(
            f"Indexed {read} as {counted(settings['documents'], 'document')}, "
            f"{counted(settings['chunks'], 'chunk')} ({settings['store']}, embeddings "
            f"{settings['embedding']}) in {out}; embedded "
            f"{counted(settings['embedded_chunks'], 'chunk')}"
            + (f", dropped {counted(settings['dropped_sources'], 'source')}" if update else "")
        )
        if settings["skipped"]:
            skipped = [ingest.Skipped(**entry) for entry in settings["skipped"]]
            say(f"Skipped {len(skipped)}: {ingest.describe_skipped(skipped)}")


def search(
    context: typer.Context,
    question: Annotated[str, typer.Argument(help="The question.")],
    index_directory: Annotated[Path, typer.Option("--index", "-i", help=_HELP["index"])],
    strategy: StrategyOption = "rag-fusion",
    hybrid: HybridOption = False,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    embedding: EmbeddingOption = None,
    n: StrategyCountOption = None,
    k: KOption = COMMAND_LINE_K,
    top_n: TopOption = None,
    json_output: Annotated[bool, typer.Option("--json", help=_HELP["json"])] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=_HELP["verbose"])] = False,
    trust_index: TrustOption = False,
) -> None:
    """``ask`` and ``retrieve``: the same options, ``retrieve`` stops before the answer."""
    with reported_errors():
        _check(question, strategy, index_directory)
        answer = context.info_name == "ask"
        llm = models.chat_model(model, base_url=base_url, streaming=answer)
        opened = open_index(index_directory, embedding, trust=trust_index)
        retrievers = opened.retrievers(hybrid, k)
        options: dict[str, Any] = {"n": n, "top_n": top_n}
        if answer:
            _note_offline(llm)
            chain = chains.chain_for(strategy, retrievers, llm, return_sources=True, **options)
        else:
            chain = chains.retrieval_chain(strategy, retrievers, llm, **options) | (
                lambda state: {**state, "documents": chains.quoted_documents(state)}
            )
        fusion = _fusion_shown(strategy)
        if answer and not json_output:
            return render_answer(chain, question, fusion=fusion, verbose=verbose)
        retrieved = RetrievedLists()
        result = chain.invoke({"question": question}, {"callbacks": [retrieved]})
        if json_output:
            print(json_text(json_record(result, question, strategy, retrieved.lists)))
        else:
            print_sources(result, retrieved.lists, fusion=fusion, verbose=verbose)


app.command("ask", help="Answer QUESTION: queries, fused sources, then the answer.")(search)
app.command("retrieve", help="Retrieve for QUESTION: the queries and the fused sources.")(search)


def _demo_index(directory: Path | None, rebuild: bool) -> Any:
    """The sample in memory from its shipped vectors, or kept in ``directory`` (built once, from
    the shipped vectors when they fit MiniLM): a new or empty folder, or one with the demo's index."""
    if directory is None:
        return serving.open_source(serving.IndexSource(), models.DEFAULT_EMBEDDING)
    if directory.exists() and any(directory.iterdir()):  # its index.json, read as data: the sample?
        recorded = (directory / INDEX_FILE).is_file() and read_settings(directory).get("sources")
        if [Path(str(source)).name for source in recorded or ()] != [sample_corpus_path().name]:
            raise ValueError(
                f"{directory} holds other files or an index of other sources: the demo keeps its own index; give --index a new or empty folder"
            )
    if not rebuild and (directory / INDEX_FILE).is_file():
        try:
            return open_index(directory, models.DEFAULT_EMBEDDING)
        except UntrustedIndexError:  # made by an older kit, another user, or changed: not loaded
            print_line("note", "cyan", f"cannot verify the demo index in {directory}: rebuilding")
    say(f"Indexing the SciFact sample into {directory}")
    shipped = serving.with_shipped_vectors(models.embeddings(models.DEFAULT_EMBEDDING))
    named = {"embedding_name": models.DEFAULT_EMBEDDING} if shipped else {}  # `ask` reopens it
    options = {"chunk_size": DEMO_CHUNK_SIZE, "chunk_overlap": 0, "force": True, **named}
    embedding = shipped or models.DEFAULT_EMBEDDING
    _build_index([str(sample_corpus_path())], directory, embedding=embedding, **options)
    return open_index(directory, models.DEFAULT_EMBEDDING)


@app.command()
def demo(
    index_directory: Annotated[
        Path | None, typer.Option("--index", "-i", file_okay=False, help=_HELP["demo_index"])
    ] = None,
    question: Annotated[str, typer.Option(help="The question to answer.")] = SAMPLE_QUESTION,
    strategy: StrategyOption = "rag-fusion",
    rebuild: Annotated[bool, typer.Option("--rebuild", help=_HELP["rebuild"])] = False,
) -> None:
    """Answer a question offline over the bundled SciFact sample. Hybrid search, no model."""
    with reported_errors():
        _check(question, strategy)
        if rebuild and index_directory is None:
            raise ValueError("--rebuild needs --index DIR: without it the sample is indexed anew")
        opened = _demo_index(index_directory, rebuild)
        output.print(Text("Question: ", style="bold") + Text(question), soft_wrap=True)
        retrievers = opened.retrievers(hybrid=True, k=COMMAND_LINE_K)
        chain = chains.chain_for(strategy, retrievers, None, return_sources=True)
        render_answer(chain, question, fusion=_fusion_shown(strategy))


@app.command()
def serve(
    index_directory: Annotated[
        Path | None, typer.Option("--index", "-i", help=_HELP["serve_index"])
    ] = None,
    chroma_url: Annotated[str | None, typer.Option(help=_HELP["chroma_url"])] = None,
    chroma_collection: Annotated[str | None, typer.Option(help=_HELP["chroma_collection"])] = None,
    strategy: StrategyOption = "rag-fusion",
    hybrid: HybridOption = False,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    embedding: EmbeddingOption = None,
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535, help=_HELP["port"])] = 8000,
    k: KOption = COMMAND_LINE_K,
    top_n: TopOption = None,
    trust_index: TrustOption = False,
    allow_host: Annotated[list[str] | None, typer.Option(help=_HELP["allow_host"])] = None,
) -> None:
    """Serve the strategy's chain with LangServe. On 127.0.0.1: /STRATEGY and /STRATEGY/sources."""
    with reported_errors():
        source = serving.IndexSource.from_environment(
            index=index_directory, chroma_url=chroma_url, chroma_collection=chroma_collection
        )
        _check(None, strategy, source.index)
        uvicorn = require_extra("uvicorn", "serve")
        try:  # bound before anything loads, and this socket served by uvicorn (which closes it)
            listening = socket.create_server(("127.0.0.1", port))
        except OSError as error:  # in use, or below 1024 (not allowed): either way, another port
            raise OSError(f"port {port}: {error.strerror}: pick another with --port") from None
        llm = models.chat_model(model, base_url=base_url, streaming=True)
        opened = serving.open_source(source, embedding, trust=trust_index)
        _note_offline(llm)
        retrievers = opened.retrievers(hybrid, k)
        routes = {}
        for path, sources in ((strategy, False), (f"{strategy}/sources", True)):
            chain = chains.chain_for(strategy, retrievers, llm, return_sources=sources, top_n=top_n)
            routes[path] = serving.build_chain(strategy, return_sources=sources, chain=chain)
        server = serving.create_app(routes, allowed_hosts=allow_host or ())
        where = f"{source.describe()} on http://127.0.0.1:{port}/{strategy}"
        links = f"(playground: /{strategy}/playground/, with sources: /{strategy}/sources)"
        say(f"Serving {strategy} over {where} {links}")
        uvicorn.Server(uvicorn.Config(server, log_level="warning")).run(sockets=[listening])


def _announce_corpus_embedding(dataset_dir: Path, cache: Path | None) -> None:
    """Say, before the wait, that dense setups embed the whole corpus (once, if cached)."""
    corpus = dataset_dir / "corpus.jsonl"
    if not corpus.is_file():
        return  # the evaluation names the missing file
    with corpus.open("rb") as lines:
        passages = sum(1 for _ in lines)
    low, high = passages / 50 / 60, passages / 15 / 60  # MiniLM on 2 CPU cores: 15-50 a second
    reuse = f"later runs reuse the cache in {cache}" if cache else "--no-cache: every run embeds"
    message = f"the dense setups embed the corpus ({passages:,} passages) unless it is cached: about {low:.2g}-{high:.2g} min on 2 CPU cores the first time; {reuse}"
    print_line("note", "cyan", message)


@app.command("eval")
def eval_dataset(
    dataset_dir: Annotated[Path, typer.Argument(help=_HELP["dataset"])],
    setups: Annotated[str, typer.Option(help=_HELP["setups"])] = ",".join(DEFAULT_SETUPS),
    split: Annotated[str, typer.Option(help="Qrels split: qrels/SPLIT.tsv.")] = "test",
    queries_limit: Annotated[int | None, typer.Option(min=1, help=_HELP["limit"])] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help=_HELP["json_out"])] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a bar chart (PNG).")] = None,
    cache_dir: Annotated[Path | None, typer.Option(help=_HELP["cache"])] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not cache embeddings.")] = False,
    stat_test: Annotated[str, typer.Option(help="Paired test: student or fisher.")] = "student",
    max_p: Annotated[float, typer.Option(min=0.0, max=1.0, help="Significance level.")] = 0.05,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    embedding: NewEmbeddingOption = None,
    n: StrategyCountOption = None,
    langsmith: Annotated[bool, typer.Option("--langsmith", help=_HELP["langsmith"])] = False,
) -> None:
    """Evaluate retrieval setups on a BEIR dataset. nDCG@10, Recall@100, MRR@10, MAP (ranx)."""
    with reported_errors():
        if stat_test not in evaluate.STAT_TESTS:
            raise ValueError(f"--stat-test: {stat_test!r} is not one of {evaluate.STAT_TESTS}")
        names = [name.strip() for name in setups.split(",") if name.strip()]
        if not names or len(set(names)) != len(names):  # refused before any note is printed
            raise ValueError(f"--setups: name each setup once, e.g. bm25,dense; got {setups!r}")
        llm = models.chat_model(model, base_url=base_url)
        chosen = [evaluate.setup_by_name(name, llm=llm, n=n) for name in names]
        if n is not None and all(setup.settings.get("n") is None for setup in chosen):
            raise ValueError(f"--queries: none of {', '.join(names)} generates several queries")
        cache = None if no_cache else (cache_dir or evaluate.DEFAULT_CACHE_DIR)
        common: dict[str, Any] = {"split": split, "queries_limit": queries_limit}
        common |= {"embeddings": embedding, "cache_dir": cache}
        use_langsmith = langsmith and evaluate.langsmith_configured()
        if langsmith and not use_langsmith:
            say("LangSmith is not configured (LANGSMITH_API_KEY); evaluated locally")
        if any(name != "bm25" for name in names):
            _announce_corpus_embedding(dataset_dir, cache)
        experiments: list[Any] = []
        with progress_display("completed") as common["progress"]:
            if use_langsmith:
                summary, experiments = evaluate.run_langsmith_experiments(
                    dataset_dir, chosen, **common
                )
            else:
                tests: dict[str, Any] = {"stat_test": stat_test, "max_p": max_p}
                summary = evaluate.run_experiment(dataset_dir, chosen, **common, **tests)
        named = [each.experiment_name for each in experiments]
        output.print(evaluate.comparison_table(summary, named))
        for each in experiments:
            where = each.url or f"dataset {each.dataset_name}"
            say(f"{each.setup}: {each.experiment_name} at {where}")
        if json_path is not None:
            say(f"Wrote {evaluate.write_json(json_path, summary)}")
        if plot is not None:
            say(f"Wrote {evaluate.write_plot(plot, summary)}")


def _print_version(requested: bool) -> None:
    if requested:
        typer.echo(f"rag-fusion {__version__}")
        raise typer.Exit()


@app.callback()
def settings(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Query transformation and result fusion for retrieval-augmented generation."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # model loading stays quiet


main = app  # the console-script entry point

if __name__ == "__main__":
    app()
