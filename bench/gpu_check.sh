#!/bin/sh
# A real GPU read through Cockpit's NVML gateway and through the nvidia-smi path, side by side:
# memory used/total, per-process memory, utilisation; exit 0 when they agree within 1 %.
# Run on the GPU machine from the repo (its venv has nvidia-ml-py); no network needed.
# Usage: bench/gpu_check.sh [--json] [--nvml-from SAMPLE.json]     (details: bench/gpu_check.py)
set -eu
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" bench/gpu_check.py "$@"
