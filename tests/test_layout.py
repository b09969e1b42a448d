"""The tests mirror the house: a test lives in the folder of the cockpit package it tests.

The next engineer looks for a package's tests under `tests/<package>/`; a module left at the top
(79 of them once) hides which package it holds to. The top level keeps the root conftest and the
few tests of the whole package (its layers, its vocabulary, its start-up imports, `cockpit/aio.py`)."""

from __future__ import annotations

from pathlib import Path

import cockpit

TESTS = Path(__file__).resolve().parent
COCKPIT = Path(cockpit.__file__).resolve().parent

MAX_TOP_LEVEL = 10
# folders that hold no package's tests: the data the tests read
NOT_TESTS = {"data", "fixtures"}
# folders named after a tier of the suite rather than one package (docs/TESTING.md, "Tiers")
TIERS = {"real_engine", "reliability", "third_engine"}


def _packages() -> set[str]:
    """Every top-level package and module of cockpit/, by the name a folder would carry."""
    names = {p.name for p in COCKPIT.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    names |= {p.stem for p in COCKPIT.glob("*.py") if not p.stem.startswith("_")}
    return names


def test_at_most_ten_python_files_at_the_top_of_tests() -> None:
    top = sorted(p.name for p in TESTS.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, (
        f"{len(top)} files at tests/ top level (at most {MAX_TOP_LEVEL}): move a package's tests into "
        f"tests/<package>/: {top}")


def test_every_folder_names_a_package_or_a_tier() -> None:
    allowed = _packages() | TIERS | NOT_TESTS
    folders = sorted(p.name for p in TESTS.iterdir()
                     if p.is_dir() and not p.name.startswith((".", "__")))
    strays = [f for f in folders if f not in allowed]
    assert not strays, (
        f"tests/ folders that name no cockpit package nor a tier ({sorted(TIERS)}): {strays}")


def test_the_rule_sees_the_packages() -> None:
    # a rule that found no packages would pass every folder; these are the ones the suite has
    assert {"backends", "core", "supervisor", "ui", "slurm"} <= _packages()


def test_every_serial_entry_names_a_test_that_exists() -> None:
    # tests/conftest.py places heavy modules in one xdist group by their path under tests/: a path
    # left behind by a move matches nothing and silently lets a heavy test run beside another
    from tests.conftest import ENGINE_FREE, SERIAL_PATHS, SERIAL_TESTS

    missing = [p for p in (*SERIAL_PATHS, *ENGINE_FREE) if not ((TESTS / p).is_dir() if p.endswith("/") else (TESTS / p).is_file())]
    for entry in SERIAL_TESTS:
        path, name = entry.split("::", 1)
        if not (TESTS / path).is_file() or f"def {name}(" not in (TESTS / path).read_text():
            missing.append(entry)
    assert not missing, f"SERIAL_PATHS / SERIAL_TESTS name no test: {missing}"
