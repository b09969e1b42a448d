#!/usr/bin/env bash
# Fetches SGLang's server arguments of one release, as text, for the flag-table check
# (tests/backends/test_flags_sglang_wheel.py): `pip download sglang==VERSION --no-deps` (the wheel only, none
# of its CUDA dependencies; nothing is installed or run) into a cache, then out of the wheel
# `sglang/srt/server_args.py` and, where the release declares its flags as annotated fields (0.5.2x),
# `sglang/srt/arg_groups/fields/*.py`. Prints the folder holding them. Cached: a second run
# downloads nothing.
#   bash scripts/sglang-server-args.sh 0.5.9
set -euo pipefail
version=${1:?usage: sglang-server-args.sh VERSION}
case "$version" in
  *[!0-9a-z.]*|"") echo "not a version: $version" >&2; exit 2 ;;
esac
cache=${COCKPIT_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cockpit-engines}/sglang-wheels/$version
out=$cache/src
if [ ! -s "$out/sglang/srt/server_args.py" ]; then
  mkdir -p "$cache"
  PY=${PYTHON:-python3}
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$cache" "sglang==$version" >&2
  wheel=$(ls "$cache"/sglang-"$version"-*.whl | head -n1)
  "$PY" - "$wheel" "$out" <<'PYEOF'
import sys
import zipfile

import os
import shutil

wheel, out = sys.argv[1], sys.argv[2]
part = out + ".part"
shutil.rmtree(part, ignore_errors=True)
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name == "sglang/srt/server_args.py" or (name.startswith("sglang/srt/arg_groups/fields/") and name.endswith(".py")):
            z.extract(name, part)
shutil.rmtree(out, ignore_errors=True)
os.replace(part, out)
PYEOF
fi
echo "$out"
