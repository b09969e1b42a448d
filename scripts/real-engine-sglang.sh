#!/usr/bin/env bash
# Installs SGLang's own engine on its CPU path into its own virtual environment and prints the
# venv's path (called as `bash scripts/real-engine.sh sglang`). Facts behind each step:
# ../shared/reference/sglang-cpu.md, checked against sglang 0.5.23's source.
#
# - `pip install sglang` pulls CUDA-only packages (sglang-kernel, flashinfer, cutlass …) whose wheels
#   fail at import without libcuda; so sglang goes in with --no-deps and its other requirements
#   (read from its own metadata) beside it, minus the CUDA-only ones listed in CUDA_ONLY.
# - torch 2.14.1 (SGLang's pin) with torchvision 0.29.1: SGLang imports torchvision unconditionally,
#   and a torchvision built for another torch fails at import ("operator torchvision::nms").
# - `sgl_kernel`: SGLang's CPU path imports names from it at load time. The repository's test
#   support (tests/real_engine/sgl_kernel_cpu/sgl_kernel, plain PyTorch) is copied into the venv's
#   site-packages on every run (so an edited stand-in reaches a cached venv). It is never part of
#   the installed Cockpit product.
# - The engine runs with SGLANG_USE_CPU_ENGINE=1 and --device cpu (the tests set both).
set -euo pipefail
cd "$(dirname "$0")/.."

SGLANG_VERSION=${SGLANG_VERSION:-0.5.23}
TORCH_VERSION=${SGLANG_TORCH_VERSION:-2.14.1}
TORCHVISION_VERSION=${SGLANG_TORCHVISION_VERSION:-0.29.1}
DIR=${COCKPIT_REAL_ENGINE_DIR:-$HOME/.cache/cockpit-engines}
VENV="$DIR/sglang-$SGLANG_VERSION"
STAMP="$VENV/.cockpit-installed"
PY=${PYTHON:-python3}
# SGLang's requirements that are CUDA builds (or only serve CUDA kernels); torchaudio/torchcodec pin
# other torch releases and a text model needs neither.
CUDA_ONLY="cuda-python flash-attn-4 flashinfer-python humming-kernels nvidia-cutlass-dsl nvidia-mathdx
nvshmem4py-cu13 quack-kernels sgl-deep-ep sgl-deep-gemm sgl-flash-mla sglang-kernel tilelang
torch-memory-saver torchaudio torchcodec"

# pip's chatter to stderr (stdout is the venv's path alone: scripts/test.sh captures it); its resolver
# lists the CUDA-only requirements left out on purpose, so those lines are dropped too
quiet() {
  grep -v -e '^WARNING: Location' -e 'is ignored: it is neither a file nor a directory' \
    -e "^ERROR: pip's dependency resolver does not currently" -e '^sglang [0-9.]* requires .*, which is not installed' \
    -e 'following dependency conflicts' >&2 || true
}

copy_stand_in() {
  local site
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -rf "$site/sgl_kernel"
  cp -r tests/real_engine/sgl_kernel_cpu/sgl_kernel "$site/sgl_kernel"
  find "$site/sgl_kernel" -name __pycache__ -prune -exec rm -rf {} +
}

if [ ! -f "$STAMP" ]; then
  rm -rf "$VENV"
  mkdir -p "$DIR"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" 2>&1 | quiet
  "$VENV/bin/python" -m pip install -q --no-deps "sglang==$SGLANG_VERSION" 2>&1 | quiet
  reqs=$("$VENV/bin/python" - "$CUDA_ONLY" <<'PYEOF'
import sys
from importlib.metadata import requires

from pip._vendor.packaging.requirements import Requirement  # pip's own copy: nothing installed yet
from pip._vendor.packaging.utils import canonicalize_name

drop = {canonicalize_name(n) for n in sys.argv[1].split()}
for line in requires("sglang") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # extras and other platforms
    if canonicalize_name(req.name) in drop or canonicalize_name(req.name) in {"torch", "torchvision"}:
        continue
    print(str(req).split(";")[0].strip())
PYEOF
)
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install -q $(printf "%s\n" "$reqs" | sed 's/ //g') \
    "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" 2>&1 | quiet
  copy_stand_in
  SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c 'import sglang.srt.entrypoints.http_server, torchvision' \
    || { echo "sglang did not install into $VENV (see the import error above)" >&2; exit 1; }
  touch "$STAMP"
fi
copy_stand_in

# py-spy beside the engine, as with vLLM: `cockpit stacks` finds it in the engine's venv (SGLang
# lists it among its requirements; checked here for a venv cached before).
PY_SPY_VERSION=${PY_SPY_VERSION:-0.4.3}
if [ ! -x "$VENV/bin/py-spy" ]; then
  "$VENV/bin/python" -m pip install -q "py-spy==$PY_SPY_VERSION" 2>&1 | quiet
  [ -x "$VENV/bin/py-spy" ] || { echo "py-spy did not install into $VENV" >&2; exit 1; }
fi

# the tiny checkpoints (random-weight Llamas, fp32, a byte-level BPE tokenizer that decodes)
"$VENV/bin/python" tests/real_engine/make_checkpoints.py "$DIR/models" >&2
echo "$VENV"
