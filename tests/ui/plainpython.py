"""Run code in a fresh interpreter where textual and rich cannot be imported.

The Textual-free parts of the UI (the log model, the run control, the dashboard's controllers) must
work without either. Blocking the two packages proves that more strongly than listing what got
loaded: httpx, which the face's serving half imports, loads rich for its own command line when rich
is installed and quietly goes without it when it is not, so "rich was loaded" says nothing about our
code, while "it ran with rich unimportable" does.
"""

from __future__ import annotations

import json
import subprocess
import sys

BLOCK = """
import importlib.abc, sys
class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('textual', 'rich'):
            raise ModuleNotFoundError(f'blocked in this test: {name}', name=name)
        return None
sys.meta_path.insert(0, _Blocked())
"""


def run_without_textual(code: str) -> object:
    """Run `code` (which prints one JSON value on its last line) with textual and rich blocked;
    returns that value. Fails if the code fails or a Textual module got in some other way."""
    tail = "\nimport json as _j, sys as _s\nprint(_j.dumps(sorted({n.split('.')[0] for n in _s.modules} & {'textual', 'rich'})))\n"
    r = subprocess.run([sys.executable, "-c", BLOCK + code + tail], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == [], lines[-1]
    return json.loads(lines[-2]) if len(lines) >= 2 else None
