#!/bin/sh
# Every Cockpit benchmark in sequence (~13 min on a 2-core machine; 10M-line runs included).
# Each prints the machine, its figures and the ratio against the alternative it runs beside.
# Usage: bench/run_all.sh [OUTPUT_DIR]   (one .txt per benchmark there, default bench/out/, git-ignored)
#        bench/run_all.sh --check [--no-ui] [--runs N]
#            the regression gate (bench/check.py, ~3 min): the budget's ratios now against the figures
#            recorded in docs/PERFORMANCE.md; prints a table, exits 1 when one is more than 15 % worse
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
if [ "${1:-}" = "--check" ]; then
    shift
    exec "$PY" bench/check.py "$@"
fi
OUT=${1:-bench/out}
mkdir -p "$OUT"
run() {
    name=$1
    shift
    echo "== $name: $*"
    "$PY" "$@" 2>&1 | tee "$OUT/$name.txt"
}
run startup bench/startup.py --importtime
run log_pipeline_1m bench/log_pipeline.py
run log_pipeline_10m bench/log_pipeline.py --lines 10000000 --runs 3
run hostile_lines bench/hostile_lines.py
run follow bench/follow.py --memory
run remote bench/remote.py
run ui bench/ui.py
run ui_memory bench/ui.py --only memory
