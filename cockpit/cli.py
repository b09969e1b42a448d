"""The `cockpit` command. Parsing only: each subcommand lives in cockpit/commands/<name>.py and
is imported when it runs, so `cockpit --help` stays fast (no textual, asyncssh or pydantic)."""

from __future__ import annotations

import argparse
import os
import sys

TYPE_CHECKING = False  # not `typing`'s: importing typing costs `--help` ~3 ms (mypy reads this name as typing's)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, NoReturn

EPILOG = """\
commands in the order an operator meets them:
  cockpit demo [--backend NAME]     the TUI on a simulated run (no GPU needed)
  cockpit check PROFILE             preflight: flags, host-cache per-rank arithmetic, host facts
  cockpit plan PROFILE              memory plan: KV tokens and headroom per memory setting
  cockpit up PROFILE --wait ready   launch detached on the profile's hosts
  cockpit restart PROFILE --set F=V the gate on the new flags, then stop, GPUs free, launch
  cockpit status PROFILE            phase, per-rank memory, findings
  cockpit logs PROFILE -f --filter memory
  cockpit diagnose LOG              explain a log (crash, headroom, the flag to change)
  cockpit stacks PROFILE            py-spy stacks of every process, the odd rank named
  cockpit down PROFILE              stop, then wait until GPU memory is released
  cockpit runs                      the journal of past runs
  cockpit report RUN|PROFILE|LOG    a redacted Markdown report to paste into an upstream issue
  cockpit bench PROFILE             load test of the live run (tok/s, TTFT, ITL, E2E)
  cockpit tune PROFILE              launch, measure, move: the best setting without a crash
exit codes: 0 ok, 1 a critical finding or a failed run, 2 bad input
"""


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    from cockpit.errors import close_words  # `--help` start-up: tests/test_startup_imports.py

    near = close_words(word, list(choices))
    return f"; did you mean {' or '.join(near)}?" if near else ""


def _options_of(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings]


class _Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a mistyped subcommand or choice."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        import re

        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            message += _did_you_mean(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
        super().error(message)


def _columns() -> int:
    """What `shutil.get_terminal_size` says (COLUMNS, else the terminal, else 80), without importing
    shutil: argparse's formatter would, and with it bz2, lzma and fnmatch (~3 ms of `--help`)."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class _Formatter(argparse.HelpFormatter):
    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, width if width is not None else _columns() - 2)

    def _split_lines(self, text: str, width: int) -> list[str]:
        """argparse's, without importing textwrap (~1 ms of `--help`) for a help line that fits:
        textwrap would return it whole (no tab or ASCII whitespace left but single spaces, none at
        its ends). Below 91 columns two lines of `cockpit --help` wrap, and textwrap does it."""
        text = self._whitespace_matcher.sub(" ", text).strip()
        if text and len(text) <= width:
            return [text]
        return super()._split_lines(text, width)


class _RawFormatter(argparse.RawDescriptionHelpFormatter, _Formatter):
    """The top-level help: its epilog is laid out by hand."""


# every subcommand, in the order of `cockpit --help` (tests/commands/test_cli_*.py holds it to the parser's)
COMMANDS = ("tui", "demo", "diagnose", "check", "plan", "up", "restart", "status", "logs", "down", "stacks", "runs",
            "report",
            "bench", "tune", "sim")


def build_parser(command: str | None = None, *, names_only: bool = False) -> argparse.ArgumentParser:
    """The whole CLI; with `command` (one of COMMANDS), the top level and that subcommand only: the
    same parse of a command line that starts with it, without building the other parsers (~3 ms).
    With `names_only`, every subcommand's name and line of help but none of their arguments: what
    `cockpit --help` prints, and the same parse of a command line that names no subcommand (argparse
    then never enters one: `cockpit`, `cockpit --version`, a mistyped command), ~3 ms sooner."""
    # here, not at the head: importing the registry reads COCKPIT_EXTRA_BACKENDS, and a malformed
    # entry must reach _main's handler as bad input (exit 2, no traceback: tests/third_engine/test_lifecycle.py)
    from cockpit.backends import DEFAULT_BACKEND, backend_names, engine_names

    engines = backend_names()
    p = _Parser(
        prog="cockpit",
        description=f"A keyboard-driven cockpit for LLM inference servers ({engine_names()}) on multi-GPU hosts.",
        epilog=EPILOG,
        formatter_class=_RawFormatter,
    )
    p.add_argument("--version", action="version", version="cockpit 0.1.0")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, help: str, **kwargs: Any) -> argparse.ArgumentParser | None:
        """The subcommand's parser, for its arguments; None when they are not wanted."""
        if command is not None and command != name:
            return None
        if names_only:
            # its line in the help and its name among the choices, no parser (~0.15 ms each): the
            # parse never enters one
            sub._choices_actions.append(sub._ChoicesPseudoAction(name, (), help))
            sub.choices[name] = None  # type: ignore[assignment]
            return None
        return sub.add_parser(name, help=help, **kwargs)

    if s := add("tui", help="the TUI: profile picker, or a profile's dashboard"):
        s.add_argument("profile", nargs="?", help="profile name or path; omit for the picker")
        s.add_argument("--theme", help="dark (default), light or high-contrast")

    if s := add("demo", help=f"the TUI on a bundled demo profile (simulated {engine_names()})"):
        s.add_argument("--theme", help="dark (default), light or high-contrast")
        s.add_argument("--sim-speed", type=float, default=None, help="override the demo's simulator speed")
        s.add_argument("--sim-startup-speed", type=float, default=None,
                       help="the simulator's speed until the server is ready (default: --sim-speed)")
        s.add_argument("--backend", choices=engines, default=DEFAULT_BACKEND,
                       help=f"which engine's story: its own bundled demo profile (default {DEFAULT_BACKEND})")
        s.add_argument("--port", type=int, default=None, help="the simulated server's HTTP port (default: the demo profile's)")

    if s := add("diagnose", help=f"parse {engine_names()} logs and explain them"):
        s.add_argument("logs", nargs="+", metavar="LOG", help="one or more log files, or - for standard input")
        s.add_argument("--json", action="store_true", help="machine-readable output")
        s.add_argument("--target-headroom-gb", type=float, default=None, help="free GiB per rank wanted after capture (default 5.0)")
        s.add_argument("--host-mem-gb", type=float, default=None, help="what-if: host RAM available, decimal GB (host-cache sizing)")
        s.add_argument("--gpu-mem-gb", type=float, default=None, help="what-if: memory per GPU, GiB as nvidia-smi shows it")
        s.add_argument("--gpus", type=int, default=None, help="what-if: GPUs per node (host-cache ranks per node)")

    if s := add("check", help="preflight a profile against its hosts"):
        s.add_argument("profile", help="profile name (from the profiles folder) or path to its YAML file")
        s.add_argument("--json", action="store_true", help="machine-readable output (JSON)")
        s.add_argument("--host-mem-gb", type=float, default=None, help="what-if: host RAM available, decimal GB (host-cache sizing)")
        s.add_argument("--gpu-mem-gb", type=float, default=None, help="what-if: memory per GPU, GiB as nvidia-smi shows it")
        s.add_argument("--gpus", type=int, default=None, help="what-if: GPUs per node")

    if s := add("plan", help="memory plan before launch: KV tokens and headroom per memory setting"):
        s.add_argument("profile", nargs="*", help="profile name or path (or use --model-config); several: the prefill and decode groups of one deployment")
        s.add_argument("--model-config", metavar="DIR", help="a model directory with config.json (+ safetensors index or files)")
        s.add_argument("--gpu-mem-gb", type=float, default=None, help="memory per GPU, GiB as nvidia-smi shows it (what-if)")
        s.add_argument("--gpus", type=int, default=None, help="what-if: GPUs per node")
        s.add_argument("--tp", type=int, default=None, help="with --model-config: tensor parallel size")
        s.add_argument("--dp", type=int, default=None, help="with --model-config: data parallel size")
        s.add_argument("--ep", type=int, default=None, help="with --model-config: expert parallel size")
        s.add_argument("--backend", choices=engines, default=DEFAULT_BACKEND,
                       help=f"with --model-config: the engine (default {DEFAULT_BACKEND})")
        s.add_argument("--server-version", default=None, help="with --model-config: the server version (default the newest known)")
        s.add_argument("--target-headroom-gb", type=float, default=5.0, help="with --model-config: target free GiB after capture")
        s.add_argument("--warn-headroom-gb", type=float, default=3.0, help="with --model-config: warn below this many GiB")
        s.add_argument("--calibrate-from", metavar="RUN", default=None, help="calibrate from this journal run")
        s.add_argument("--no-calibration", action="store_true", help="the estimate alone, even when the journal could calibrate it")
        s.add_argument("--request-tokens", type=int, default=None, metavar="N",
                       help="concurrency column: requests of N tokens each setting holds (default the context length)")
        s.add_argument("--set", dest="overrides", action="append", default=[], metavar="FLAG=VALUE",
                       help="override a server flag (repeatable)")
        s.add_argument("--json", action="store_true", help="machine-readable output (JSON)")

    if s := add("up", help="launch a profile's server detached"):
        s.add_argument("profile", help="profile name (from the profiles folder) or path to its YAML file")
        s.add_argument("--set", dest="overrides", action="append", default=[], metavar="FLAG=VALUE",
                       help="override a server flag for this run only (repeatable)")
        s.add_argument("--wait", choices=["started", "ready"], default="started",
                       help="return once the server runs (started, the default) or once it serves: the log says "
                            "ready and /health answers 200 (ready)")
        s.add_argument("--timeout", type=float, default=900.0, help="seconds to wait (default 900)")
        s.add_argument("--force", action="store_true", help="launch even when the memory plan predicts too little headroom")
        s.add_argument("--json", action="store_true", help="machine-readable output (JSON)")

    if s := add("restart", help="restart a profile's live run through the preflight gate"):
        s.add_argument("profile", help="profile name (from the profiles folder) or path to its YAML file")
        s.add_argument("--set", dest="overrides", action="append", default=[], metavar="FLAG=VALUE",
                       help="change a server flag for the new run (repeatable; the run's other flags are kept)")
        s.add_argument("--wait", choices=["started", "ready"], default="started",
                       help="return once the new server runs (started, the default) or once it serves (ready)")
        s.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the new run (default 900)")
        s.add_argument("--force", action="store_true",
                       help="restart even when the memory plan predicts too little headroom")
        s.add_argument("--json", action="store_true", help="machine-readable output (JSON)")

    if s := add("status", help="attach to a profile's run and report"):
        s.add_argument("profile", help="profile name (from the profiles folder) or path to its YAML file")
        s.add_argument("--json", action="store_true", help="machine-readable output (JSON)")

    if s := add("logs", help="the server log, filtered"):
        s.add_argument("profile", help="profile name (from the profiles folder) or path to its YAML file")
        s.add_argument("-f", "--follow", action="store_true", help="keep printing new lines as the server writes them (ctrl+c ends)")
        s.add_argument("--tail", type=int, default=None, metavar="N", help="start N lines from the end")
        s.add_argument("--filter", default="all", metavar="PRESET|REGEX",
                       help="memory, errors, batches, all, or a regular expression")
        s.add_argument("--rank", default=None, help="only this rank (3 or TP3)")

    if s := add("down", help="stop a profile's run and wait for GPU memory to be released"):
        s.add_argument("profile", help="profile name (from the profiles folder) or path to its YAML file")
        s.add_argument("--timeout", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL (default 30)")
        s.add_argument("--json", action="store_true", help="machine-readable output (JSON)")

    if s := add("stacks", help="py-spy stacks of every process of the live run, ranks grouped"):
        s.add_argument("profile", help="profile name or path")
        s.add_argument("--native", action="store_true", help="include native (C/C++) frames")
        s.add_argument("--json", action="store_true", help="machine-readable output (processes, groups, odd_one_out)")
        s.add_argument("--saved", action="store_true", help="show the newest saved dump instead of taking one")

    if s := add("runs", help="the journal of runs"):
        s.add_argument("--json", action="store_true", help="machine-readable output (JSON)")
        s.add_argument("--profile", default=None, metavar="NAME", help="only this profile's runs")
        rsub = s.add_subparsers(dest="runs_command", metavar="SUBCOMMAND")
        # SUPPRESS: a --json given before the subcommand (`runs --json show ID`) must survive
        r = rsub.add_parser("show", help="one run in full")
        r.add_argument("id", help="a run id as `cockpit runs` lists it")
        r.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output (JSON)")
        r = rsub.add_parser("compare", help="runs side by side")
        r.add_argument("ids", nargs="+", metavar="ID", help="two or more run ids as `cockpit runs` lists them")
        r.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output (JSON)")

    if s := add("report", help="one redacted Markdown report of a run, to paste into an upstream issue"):
        s.add_argument("target", metavar="RUN|PROFILE|LOG",
                       help="a run id as `cockpit runs` lists it, a profile (its live or newest run), or a log file")
        s.add_argument("--output", "-o", default=None, metavar="FILE", help="write the report there (0600) instead of stdout")

    if s := add("bench", help="load test of a profile's live run: tok/s, req/s, TTFT/ITL/E2E"):
        s.add_argument("profile", help="profile name (from the profiles folder) or path to its YAML file")
        s.add_argument("--requests", type=int, default=200, metavar="N", help="requests per concurrency level (default 200)")
        s.add_argument("--concurrency", type=int, nargs="+", default=None, metavar="C",
                       help="requests in flight; several values run one level after the other (default 8)")
        s.add_argument("--input-len", type=int, default=None, metavar="L",
                       help="prompt tokens of synthetic requests (default 1024, cut to fit the run's context length)")
        s.add_argument("--output-len", type=int, default=None, metavar="L",
                       help="output tokens per request, EOS ignored (default 256, cut to fit the run's context length)")
        s.add_argument("--dataset", default="synthetic", metavar="synthetic|FILE.jsonl",
                       help="random token ids of the model's own tokenizer, or JSONL lines "
                            '{"prompt": ..., "output_len": N}')
        s.add_argument("--max-error-share", type=float, default=None, metavar="F",
                       help="stop a level (and the bench) once this share of its requests failed (default 0.5)")
        s.add_argument("--duration", type=float, default=120.0, metavar="S",
                       help="time limit per level (s); requests still running then are cancelled (default 120)")
        s.add_argument("--api", default="openai", metavar="openai|ENGINE",
                       help="streaming /v1/completions (default), or the engine's own generate API named by the engine")
        s.add_argument("--json", action="store_true", help="machine-readable output (JSON)")

    if s := add("tune", help="guided tuning: launch, measure, move; writes NAME.tuned.yaml"):
        s.add_argument("profile", help="profile name (from the profiles folder) or path to its YAML file")
        s.add_argument("--objective", choices=["throughput", "ttft-p99"], default="throughput",
                       help="what makes a setting best: the most output tokens/s (throughput, the default) or the "
                            "lowest 99th-percentile time to first token (ttft-p99)")
        s.add_argument("--slo", default=None, metavar="ttft_p99=2s,itl_p99=100ms",
                       help="latency limits a setting must keep to count as best")
        s.add_argument("--max-launches", type=int, default=6, metavar="N", help="launch budget (default 6)")
        s.add_argument("--requests", type=int, default=2000, metavar="N", help="bench requests per step (default 2000)")
        s.add_argument("--concurrency", type=int, nargs="+", default=[64], metavar="C",
                       help="bench requests in flight (default 64; the last value is used)")
        s.add_argument("--input-len", type=int, default=512, metavar="L", help="bench prompt tokens (default 512)")
        s.add_argument("--output-len", type=int, default=1024, metavar="L", help="bench output tokens (default 1024)")
        s.add_argument("--dataset", default="synthetic", metavar="synthetic|FILE.jsonl",
                       help='bench prompts: random tokens (synthetic, the default) or JSONL lines {"prompt": ..., "output_len": N}')
        s.add_argument("--duration", type=float, default=60.0, metavar="S", help="bench time limit per step (default 60)")
        s.add_argument("--api", default="openai", metavar="openai|ENGINE",
                       help="bench through streaming /v1/completions (default), or the engine's own generate API")
        s.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for READY per launch (default 900)")
        s.add_argument("--output", default=None, metavar="PATH", help="where to write the tuned profile")
        s.add_argument("--json", action="store_true", help="machine-readable output (JSON)")

    # `cockpit sim` parses its own (SGLang-shaped) arguments.
    add("sim", help=f"a faithful stand-in for {engine_names()} (simulated GPUs; --sim-backend NAME)", add_help=False)
    return p


def _glue_set_values(args: list[str]) -> list[str]:
    """`--set --mem-fraction-static=0.88` → `--set=--mem-fraction-static=0.88`: argparse would read a
    value that starts with dashes as another option, and DESIGN.md accepts the flag either way."""
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--set" and i + 1 < len(args) and args[i + 1].startswith("-"):
            out.append("--set=" + args[i + 1])
            i += 2
            continue
        if args[i] == "--":
            out.extend(args[i:])
            break
        out.append(args[i])
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] != ["diagnose"]:
        return _main(args_list)
    # `diagnose` is one short run whose objects (the modules it imports, the state it builds) all live
    # to its end and hold no cycles worth collecting: the collector would only walk them, ~20
    # collections and ~5 ms of a 1M-line diagnose (docs/PERFORMANCE.md, section 9). Called in process
    # (the tests), it leaves the collector as it found it.
    import gc

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _main(args_list)
    finally:
        if was_enabled:
            gc.enable()


def _main(args_list: list[str]) -> int:
    if args_list and args_list[0] == "sim":
        from cockpit.sim.main import main as sim_main  # `--help` start-up: tests/test_startup_imports.py

        return sim_main(args_list[1:])
    try:
        # the registry's names: COCKPIT_EXTRA_BACKENDS may be bad input. A command line that names its
        # command needs that command's parser only; one that names none, none of their arguments.
        if args_list and args_list[0] in COMMANDS:
            parser = build_parser(args_list[0])
        else:  # a command line that names no subcommand anywhere never enters one's parser
            parser = build_parser(names_only=not set(args_list) & set(COMMANDS))
    except Exception as exc:
        from cockpit.errors import CockpitError  # `--help` start-up: tests/test_startup_imports.py

        if not isinstance(exc, CockpitError):
            raise
        print(f"cockpit: error: {exc}", file=sys.stderr)  # not explain_error: it imports the registry
        return exc.exit_code
    args, extras = parser.parse_known_args(_glue_set_values(args_list))
    if extras:
        # a mistyped flag: name the close ones of that command (`--tial` → --tail)
        sub = _subparser(parser, args.command)
        known = _options_of(sub) if sub is not None else _options_of(parser)
        hints = "".join(_did_you_mean(e.split("=", 1)[0], known) for e in extras if e.startswith("-"))
        (sub or parser).error(f"unrecognized arguments: {' '.join(extras)}{hints}")
    command = args.command or "tui"
    if command == "tui" and not hasattr(args, "profile"):
        args.profile = None
        args.theme = None
    import importlib  # not at the top: `--help` has exited by now

    module = importlib.import_module(f"cockpit.commands.{command}")
    if command not in ("tui", "demo"):  # log text never drives the terminal (issue 18, item 1)
        from cockpit.core.safe_output import guard_terminal  # `--help` start-up: test_startup_imports.py

        guard_terminal(pipe_stays_raw=command == "logs")
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `cockpit logs … | head` closes the pipe: not an error for the operator
        return 0
    except Exception as exc:  # the single place bad input becomes one clear line, never a traceback
        return explain_error(exc)


def _subparser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser | None:
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction) and command in a.choices:
            return a.choices[command]
    return None


def explain_error(exc: BaseException) -> int:
    """Print `exc` for the operator and return the exit code the CLI contract gives it."""
    import os
    import traceback

    # what a failed command raised: imported once it has (`--help` start-up: tests/test_startup_imports.py)
    from cockpit.backends.base import FlagError
    from cockpit.core.profile import ProfileError
    from cockpit.errors import CockpitError

    if isinstance(exc, ProfileError):
        print(f"cockpit: error: {exc}", file=sys.stderr)
        return 2
    if isinstance(exc, FlagError):
        print(f"cockpit: error: {exc}", file=sys.stderr)
        return 2
    from cockpit.transport.base import TransportError  # `--help` start-up: tests/test_startup_imports.py

    if isinstance(exc, TransportError):
        print(f"cockpit: error: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return 1
    if isinstance(exc, CockpitError):
        print(f"cockpit: error: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    # Unexpected: still one line, with the trace only when asked for.
    print(f"cockpit: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
    if os.environ.get("COCKPIT_DEBUG"):
        traceback.print_exception(exc)
    else:
        print("  hint: set COCKPIT_DEBUG=1 to see the traceback", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
