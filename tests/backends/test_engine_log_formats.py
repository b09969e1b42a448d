"""Every log format an engine can print by its own configuration reads as its default one (issue 35,
item 5).

The formats, from the engines' source (SGLang 0.5.23 and vLLM 0.32.0 as installed under
~/.cache/cockpit-engines; quoted, not copied):

SGLang, `sglang/srt/utils/common.py` `configure_logger`:
    maybe_ms = ".%(msecs)03d" if envs.SGLANG_LOG_MS.get() else ""
    format = f"[%(asctime)s{maybe_ms}{prefix}] %(message)s"      datefmt="%Y-%m-%d %H:%M:%S"
  and `SGLANG_LOGGING_CONFIG_PATH` (any `logging.config.dictConfig`: an operator's format around the
  logger name, tests/backends/test_wrapper_property.py's logger formats); `sglang/srt/server_args.py`
  (before the logger is configured): `format="[%(asctime)s] %(message)s"` (no rank prefix).

vLLM, `vllm/logger.py`:
    _FORMAT = (f"{envs.VLLM_LOGGING_PREFIX}(%(vllm_process_name)s "
               "pid=%(process)d) %(levelname)s %(asctime)s "
               "[%(fileinfo)s:%(lineno)d] %(message)s")        _DATE_FORMAT = "%m-%d %H:%M:%S"
  `VLLM_LOGGING_PREFIX` before it; at `VLLM_LOGGING_LEVEL=DEBUG` `NewLineFormatter` makes
  `%(fileinfo)s` the file's shortened path (`shrink_path`: `v1/engine/core.py`,
  `model_executor/.../utils/fp8_utils.py`); `ColoredFormatter` (a terminal, `VLLM_LOGGING_COLOR=1`)
  wraps the process group in `\\033[0;36m…\\033[0;0m`, the time and the file in `\\033[90m…\\033[0m`
  and the level in its colour; `--logging-config.formatter json` (`vllm/logging_utils/formatter.py`
  JSON_FORMAT `"%(asctime)s %(levelname)s %(name)s %(processName)s %(process)d %(message)s"`
  through `pythonjsonlogger.jsonlogger.JsonFormatter`): one JSON object per record. Older
  releases (`vllm/logger.py` of 0.8.5, 0.10.1.1): `f"{VLLM_LOGGING_PREFIX}%(levelname)s %(asctime)s "
  "[%(filename)s:%(lineno)d] %(message)s"`; of 0.2.7–0.6.3: `"%(levelname)s %(asctime)s
  %(filename)s:%(lineno)d] %(message)s"`.

Each catalogued decisive message (test_wrapper_property's DECISIVE, a fixed sample across the
catalogue) is rendered as its newest release prints it by default (bench/catalogue_coverage.py),
then every record head is re-rendered in the other format; kind, phase and rank must be the
default's (kind and phase where the format prints no rank).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.backends.test_wrapper_property import DECISIVE, _bare, _read

# SGLang's record head as configure_logger prints it by default: `[YYYY-MM-DD HH:MM:SS PREFIX] `
_SGL_HEAD = re.compile(r"^\[(?P<date>\d{4}-\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d)(?P<prefix>(?: [A-Z_]+\d+)*)\] ")
# vLLM's: `(PROCESS pid=N) LEVEL MM-DD HH:MM:SS [file.py:N] `, the process group from 0.11
_VLLM_HEAD = re.compile(r"^(?:\((?P<proc>[^)]*?) pid=(?P<pid>\d+)\) )?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                        r"(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d) \[(?P<file>[\w.]+):(?P<lineno>\d+)\] ")

Render = Callable[[re.Match[str], str], str]  # (the default head, the message) -> the line


def _sglang_ms(m: re.Match[str], msg: str) -> str:  # SGLANG_LOG_MS=1
    return f"[{m['date']} {m['time']}.417{m['prefix']}] {msg}"


def _sglang_unconfigured(m: re.Match[str], msg: str) -> str:  # server_args.py's basicConfig: no prefix
    return f"[{m['date']} {m['time']}] {msg}"


def _proc(m: re.Match[str]) -> str:
    return f"({m['proc']} pid={m['pid']}) " if m["proc"] else ""


def _vllm_prefix(m: re.Match[str], msg: str) -> str:  # VLLM_LOGGING_PREFIX="[node-3] "
    return f"[node-3] {_proc(m)}{m['level']} {m['md']} {m['hms']} [{m['file']}:{m['lineno']}] {msg}"


def _vllm_prefix_v0(m: re.Match[str], msg: str) -> str:  # 0.8–0.10's format (no group) with a prefix
    return f"[node-3] {m['level']} {m['md']} {m['hms']} [{m['file']}:{m['lineno']}] {msg}"


def _vllm_v0(m: re.Match[str], msg: str) -> str:  # 0.2–0.6: `%(filename)s:%(lineno)d]`, no group, no `[`
    return f"{m['level']} {m['md']} {m['hms']} {m['file']}:{m['lineno']}] {msg}"


def _vllm_debug_path(m: re.Match[str], msg: str) -> str:  # VLLM_LOGGING_LEVEL=DEBUG: shrink_path
    path = f"v1/engine/.../{m['file']}" if m["file"] != "llm_engine.py" else "engine/llm_engine.py"
    return f"{_proc(m)}{m['level']} {m['md']} {m['hms']} [{path}:{m['lineno']}] {msg}"


def _vllm_colour(m: re.Match[str], msg: str) -> str:  # ColoredFormatter
    colour = {"DEBUG": "37", "INFO": "32", "WARNING": "33", "ERROR": "31", "CRITICAL": "35"}[m["level"]]
    proc = f"\x1b[0;36m({m['proc']} pid={m['pid']})\x1b[0;0m " if m["proc"] else ""
    return (f"{proc}\x1b[{colour}m{m['level']}\x1b[0m \x1b[90m{m['md']} {m['hms']}\x1b[0m "
            f"\x1b[90m[{m['file']}:{m['lineno']}]\x1b[0m {msg}")


def _vllm_json(m: re.Match[str], msg: str) -> str:  # --logging-config.formatter json
    proc = m["proc"] or "MainProcess"
    return json.dumps({"asctime": f"2025-{m['md']} {m['hms']},512", "levelname": m["level"],
                       "name": "vllm." + m["file"].removesuffix(".py"), "processName": proc,
                       "process": int(m["pid"] or 4000), "message": msg})


_FORMATS: dict[str, tuple[str, re.Pattern[str], Render, bool]] = {
    # name: (engine, its default head, the rendering, whether the format prints the rank)
    "sglang SGLANG_LOG_MS": ("sglang", _SGL_HEAD, _sglang_ms, True),
    "sglang before configure_logger": ("sglang", _SGL_HEAD, _sglang_unconfigured, False),
    "vllm VLLM_LOGGING_PREFIX": ("vllm", _VLLM_HEAD, _vllm_prefix, True),
    "vllm DEBUG file paths": ("vllm", _VLLM_HEAD, _vllm_debug_path, True),
    # older releases' formats print no process group: no rank
    "vllm 0.8-0.10 with VLLM_LOGGING_PREFIX": ("vllm", _VLLM_HEAD, _vllm_prefix_v0, False),
    "vllm 0.2-0.6": ("vllm", _VLLM_HEAD, _vllm_v0, False),
    "vllm ColoredFormatter": ("vllm", _VLLM_HEAD, _vllm_colour, True),
    "vllm JSON formatter": ("vllm", _VLLM_HEAD, _vllm_json, True),
}


def _sample(engine: str, n: int = 40) -> list[dict[str, Any]]:
    """A fixed sample spread over the engine's decisive messages (every k-th)."""
    entries = [e for e in DECISIVE if e["engine"] == engine]
    step = max(1, len(entries) // n)
    return entries[::step][:n]


def _render(bare: str, head: re.Pattern[str], render: Render) -> str:
    out = []
    for line in bare.splitlines():
        m = head.match(line)
        out.append(render(m, line[m.end():]) if m else line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("fmt", sorted(_FORMATS))
def test_an_engines_own_log_format_reads_as_its_default(fmt: str) -> None:
    engine, head, render, ranked = _FORMATS[fmt]
    wrong = []
    for entry in _sample(engine):
        bare = _bare(entry)
        want, got = _read(bare), _read(_render(bare, head, render))
        if (got if ranked else got[:2]) != (want if ranked else want[:2]):
            wrong.append((entry["text"][:70], want, got))
    assert not wrong, (fmt, len(wrong), wrong[:5])


def test_the_formats_render_the_records() -> None:
    """Each rendering changes every record head of a sample log (the test reads what it claims)."""
    for name, (engine, head, render, _ranked) in _FORMATS.items():
        bare = _bare(_sample(engine)[0])
        heads = [ln for ln in bare.splitlines() if head.match(ln)]
        assert heads, name
        rendered = _render(bare, head, render)
        assert not set(heads) & set(rendered.splitlines()), name
