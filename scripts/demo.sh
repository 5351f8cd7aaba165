#!/usr/bin/env bash
# Install the kit with every integration into .venv (torch 2.13.0 first: the CPU build where pip
# finds one, e.g. TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu) and run the main job on
# the offline default: index the bundled SciFact sample with MiniLM + BM25 and answer a sample
# question with RAG-Fusion, no API key, no network.
#
# Usage: bash scripts/demo.sh [rag-fusion demo options, e.g. --strategy hyde]
# A second run skips the installation; REINSTALL=1 bash scripts/demo.sh installs again.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
started=$SECONDS

if [[ -x .venv/bin/rag-fusion && -z "${REINSTALL:-}" ]]; then
  step "Using the kit already installed in .venv (REINSTALL=1 to install again)"
else
  step "Installing into .venv: PyTorch (the CPU build with TORCH_INDEX_URL set, see the README;" \
    "else PyPI's, on Linux the CUDA build of several GB), then the kit with all its extras" \
    "(LangChain, FAISS, Chroma, bm25s, sentence-transformers with MiniLM, typer, ranx," \
    "LangServe). About 3 GB on disk (measured: 3.0 GB with the test extras); roughly 3 to" \
    "5 minutes on a fast connection, longer on a slow one. pip shows its progress below."
  python3 -m venv .venv
  step "1/3 pip itself (a few seconds)"
  .venv/bin/python -m pip install --upgrade --progress-bar on pip
  step "2/3 PyTorch 2.13.0 (the largest download, 1 to 3 minutes)"
  .venv/bin/python -m pip install --progress-bar on ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} torch==2.13.0
  step "3/3 rag-fusion-chain with every integration (1 to 2 minutes)"
  .venv/bin/python -m pip install --progress-bar on -e ".[all]"
  step "Installed in $((SECONDS - started)) s"
fi

step "Running: rag-fusion demo $*"
echo "The sample's 300 abstracts come with their MiniLM vectors, so nothing is embedded but the"
echo "question. The first run converts MiniLM for OpenVINO once (about 20 to 40 s on 2 cores);"
echo "later runs load the model and answer in a few seconds."
.venv/bin/rag-fusion demo "$@"
