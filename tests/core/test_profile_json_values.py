"""Issue 40, finding 10: what YAML can say and JSON cannot, in a JSON-valued flag.

A flag written as a YAML mapping is the JSON text the engine takes (vLLM's `--speculative-config`,
`--kv-transfer-config`). A date, `!!binary`, `.nan`/`.inf`, a set or a key that is not text inside
it used to end in `internal error: TypeError` (dates, binary) or reach the engine as `NaN`/`Infinity`
(not JSON). Each is a profile error naming the key, exit 2, no traceback, from `cockpit check` and
`cockpit plan`; so is NaN in JSON text given as a string or by `--set`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAD = "name: j\nbackend: vllm\nversion: 0.33.0\nhosts:\n  - ssh: local\nserver:\n  model: Qwen/Qwen3-32B\n"


def cockpit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xd"), "XDG_CONFIG_HOME": str(tmp_path / "xc"),
           "XDG_CACHE_HOME": str(tmp_path / "xk"), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "cockpit", *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd=tmp_path, check=False)


CASES = {
    # (the flag's YAML, the key the error names, words the error must say)
    "date": ("  speculative-config:\n    method: ngram\n    released: 2024-05-01\n",
             "speculative-config.released", "'2024-05-01'"),
    "datetime in a list": ("  kv-transfer-config:\n    kv_connector: X\n    windows: [1, 2024-05-01 10:00:00]\n",
                           "kv-transfer-config.windows[1]", "date"),
    "binary": ("  kv-transfer-config:\n    kv_connector: X\n    blob: !!binary aGVsbG8=\n",
               "kv-transfer-config.blob", "base64"),
    "nan": ("  speculative-config:\n    method: ngram\n    num_speculative_tokens: .nan\n",
            "speculative-config.num_speculative_tokens", "finite"),
    "infinity deep": ("  kv-transfer-config:\n    kv_connector: X\n    extra: {limits: {bytes: -.inf}}\n",
                      "kv-transfer-config.extra.limits.bytes", "finite"),
    "set": ("  kv-transfer-config:\n    kv_connector: X\n    hosts: !!set {a: null, b: null}\n",
            "kv-transfer-config.hosts", "list"),
    "key not text": ("  kv-transfer-config:\n    kv_connector: X\n    2024-01-01: x\n",
                     "kv-transfer-config", "not text"),
    "on as a key": ("  kv-transfer-config:\n    kv_connector: X\n    on: 1\n", "kv-transfer-config", "on/off"),
    "date as a flag's value": ("  served-model-name: 2024-05-01\n", "served-model-name", "'2024-05-01'"),
}


# every case through `check`; `plan` reads the profile the same way (two cases show it)
RUNS = [("check", c) for c in CASES] + [("plan", "date"), ("plan", "infinity deep")]


@pytest.mark.parametrize(("command", "case"), RUNS)
def test_a_value_json_cannot_hold_is_a_profile_error_naming_its_key(tmp_path: Path, command: str, case: str) -> None:
    flag, key, words = CASES[case]
    p = tmp_path / "j.yaml"
    p.write_text(HEAD + flag)
    r = cockpit(tmp_path, command, str(p))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert str(p) in r.stderr and f"{key}:" in r.stderr and words in r.stderr, r.stderr


@pytest.mark.parametrize("how", ["profile text", "--set"])
def test_nan_in_json_text_is_refused_naming_the_flag(tmp_path: Path, how: str) -> None:
    p = tmp_path / "j.yaml"
    text = '{"method": "ngram", "num_speculative_tokens": NaN}'
    if how == "--set":
        p.write_text(HEAD)
        r = cockpit(tmp_path, "plan", str(p), "--set", f"speculative-config={text}")
    else:
        p.write_text(HEAD + f"  speculative-config: '{text}'\n")
        r = cockpit(tmp_path, "check", str(p))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "--speculative-config" in r.stderr and "NaN" in r.stderr, r.stderr


def test_a_mapping_json_can_hold_still_loads(tmp_path: Path) -> None:
    p = tmp_path / "j.yaml"
    p.write_text(HEAD + "  speculative-config:\n    method: ngram\n    num_speculative_tokens: 4\n"
                 "    prompt_lookup_max: 5\n    extra: {ratio: 0.5, enabled: true, none: null, names: [a, b]}\n")
    r = cockpit(tmp_path, "check", str(p), "--json")
    assert r.returncode in (0, 1), r.stdout + r.stderr  # 2 would be a bad profile
