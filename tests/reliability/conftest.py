"""The reliability suite's session-wide ledger and its end-of-run summary.

Every test records what it did for real (a connection killed, a process SIGKILLed, a file
rotated, a hostile profile value tried) into `ledger`, a session fixture; a
`pytest_terminal_summary` hook (tests/conftest.py, calling `print_summary`) prints the totals at the end of the run:

    faults injected, faults survived, lines compared, lines lost / repeated (must be 0),
    inputs tried, per area.

The ledger is a plain object on the config (`config._reliability_ledger`), so the hook sees
what tests recorded even when some of them failed. Under pytest-xdist each worker has its own; the
workers send theirs to the controller, which sums them before the summary (tests/conftest.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import pytest


@dataclass
class Ledger:
    """Counts per area ("ssh", "server", "cockpit", "logs", "profiles", "telemetry")."""

    injected: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    survived: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lines_compared: int = 0
    lines_lost: int = 0
    lines_repeated: int = 0
    inputs: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    notes: list[str] = field(default_factory=list)

    def fault(self, area: str, n: int = 1) -> None:
        """A fault was injected for real (a kill, a restart, a rotation, ...)."""
        self.injected[area] += n

    def survive(self, area: str, n: int = 1) -> None:
        """The system came through an injected fault as the spec asks."""
        self.survived[area] += n

    def lines(self, expected: list[bytes] | list[str], got: list[bytes] | list[str]) -> tuple[int, int]:
        """Compare delivered lines with the file's: (lost, repeated), recorded. Order matters:
        `got` must be `expected` exactly; anything else counts as lost and/or repeated."""
        from collections import Counter

        exp, have = Counter(expected), Counter(got)
        lost = sum((exp - have).values())
        repeated = sum((have - exp).values())
        if lost == 0 and repeated == 0 and list(expected) != list(got):
            lost = repeated = 1  # same lines, wrong order: still a failure
        self.lines_compared += len(expected)
        self.lines_lost += lost
        self.lines_repeated += repeated
        return lost, repeated

    def tried(self, area: str, n: int = 1) -> None:
        """Hostile inputs fed to the system (profile values, garbage log bytes)."""
        self.inputs[area] += n

    def note(self, text: str) -> None:
        self.notes.append(text)


def _ledger(config: pytest.Config) -> Ledger:
    led = getattr(config, "_reliability_ledger", None)
    if led is None:
        led = Ledger()
        config._reliability_ledger = led  # type: ignore[attr-defined]
    return led


@pytest.fixture(scope="session")
def ledger(pytestconfig: pytest.Config) -> Ledger:
    return _ledger(pytestconfig)


def print_summary(terminalreporter, config) -> None:  # type: ignore[no-untyped-def]
    """The summary section; tests/conftest.py's `pytest_terminal_summary` calls it (under xdist the
    controller does not load this conftest, and it sums the workers' ledgers first)."""
    led = getattr(config, "_reliability_ledger", None)
    if led is None:
        return
    tr = terminalreporter
    tr.section("reliability summary")
    areas = sorted(set(led.injected) | set(led.survived) | set(led.inputs))
    total_inj = sum(led.injected.values())
    total_surv = sum(led.survived.values())
    tr.write_line(f"faults injected: {total_inj}   survived: {total_surv}")
    for a in areas:
        tr.write_line(f"  {a:<10} injected {led.injected.get(a, 0):>5}   survived {led.survived.get(a, 0):>5}"
                      f"   inputs tried {led.inputs.get(a, 0):>6}")
    tr.write_line(f"lines compared: {led.lines_compared}   lines lost: {led.lines_lost}   "
                  f"lines repeated: {led.lines_repeated}")
    tr.write_line(f"inputs tried: {sum(led.inputs.values())}")
    for n in led.notes:
        tr.write_line(f"  note: {n}")
