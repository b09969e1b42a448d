"""docs/GLOSSARY.md against the program: what a test can check of the operator's words."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from cockpit.core.findings import _PREDICTED_WORDS, predicted_phrases
from cockpit.ui.format import flag_labels

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = (ROOT / "docs" / "GLOSSARY.md").read_text()


def test_every_short_flag_name_the_header_uses_is_in_the_glossary() -> None:
    for flag, short in flag_labels().items():
        assert re.search(rf"`--{re.escape(flag)}`[^|]*\| {re.escape(short)} \|", GLOSSARY), (flag, short)


def test_every_prediction_reads_in_words_with_a_unit() -> None:
    for key in _PREDICTED_WORDS:
        (words,) = predicted_phrases({key: 1.5 if key != "max_model_len" else 4096})
        assert "_" not in words and key not in words, (key, words)
        assert re.search(r"GiB|GB|tokens|requests|--", words), (key, words)


def _strings(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
    return out


def test_no_maybe_plural_in_what_an_operator_reads() -> None:
    """`2 other change(s)`: counts are said with the right plural (cockpit.core.numbers.plural).
    The simulator is exempt: it prints the engines' own words."""
    found = []
    for path in sorted((ROOT / "cockpit").rglob("*.py")):
        if "sim" in path.relative_to(ROOT / "cockpit").parts[:1]:
            continue
        for line, text in _strings(path):
            if re.search(r"[a-z]\(s\)", text):
                found.append(f"{path.relative_to(ROOT)}:{line}: {text.strip()[:80]}")
    assert not found, "\n".join(found)
