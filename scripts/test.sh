#!/usr/bin/env bash
# Install everything the tests need into .venv (torch 2.13.0 first: the CPU
# build where pip finds one, e.g. TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu),
# then lint (ruff), type-check the package (mypy) and run the whole test suite. Services (stub
# OpenAI server, Chroma server, LangSmith recorder) are started by pytest fixtures on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} torch==2.13.0
.venv/bin/python -m pip install --quiet -e ".[dev]"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy rag_fusion_chain
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
