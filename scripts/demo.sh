#!/usr/bin/env bash
# Install the kit with every integration into .venv (CPU torch first, so nothing pulls a CUDA
# build) and run the main job on the offline default: index the bundled SciFact sample with
# MiniLM + BM25 and answer a sample question with RAG-Fusion, no API key, no network.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e ".[all]"
.venv/bin/rag-fusion demo "$@"
