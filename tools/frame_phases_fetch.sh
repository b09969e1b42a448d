#!/usr/bin/env bash
# The release sources tools/frame_phases.py reads: for each ENGINE==VERSION, `pip download --no-deps`
# the wheel (nothing is installed or run), keep only the package's .py files under
# $DIR/ENGINE-VERSION/src, delete the wheel (vLLM's are 100-300 MB). Cached: a second run downloads
# nothing. Prints nothing but failures; then run tools/frame_phases.py on the folders.
#   bash tools/frame_phases_fetch.sh /tmp/fp sglang==0.5.23 vllm==0.8.5 ...
set -uo pipefail
dir=${1:?usage: frame_phases_fetch.sh DIR ENGINE==VERSION...}; shift
PY=${PYTHON:-python3}
for spec in "$@"; do
  case "$spec" in
    sglang==*|vllm==*) ;;
    *) echo "not ENGINE==VERSION (sglang or vllm): $spec" >&2; exit 2 ;;
  esac
  eng=${spec%%==*}; ver=${spec##*==}
  d=$dir/$eng-$ver
  [ -d "$d/src/$eng" ] && continue
  mkdir -p "$d"
  if ! "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$d" "$spec" >/dev/null 2>&1; then
    echo "download failed: $spec" >&2; continue
  fi
  "$PY" - "$d" "$eng" <<'PYEOF'
import sys, zipfile
from pathlib import Path
d, eng = Path(sys.argv[1]), sys.argv[2]
for w in d.glob("*.whl"):
    with zipfile.ZipFile(w) as z:
        for n in z.namelist():
            if n.startswith(eng + "/") and n.endswith(".py"):
                z.extract(n, d / "src")
    w.unlink()
PYEOF
done
