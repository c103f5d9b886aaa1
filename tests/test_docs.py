"""The documentation's links resolve: every relative Markdown link, and every ``docs/...`` path the
code, the tests and the docs name (help texts, comments, error messages point users there)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: [text](target): the target up to a space, a '#' anchor or the closing bracket
LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)\s]*)?\)")
#: a docs/ path as prose and code name it (`docs/reference/toggles.md`, docs/results/profiling.md)
DOCS_PATH = re.compile(r"(?<![\w/.-])docs/[\w./-]*[\w/]")


def _files(*patterns: str) -> list[Path]:
    return sorted({p for pattern in patterns for p in ROOT.glob(pattern)
                   if ".git" not in p.parts and "node_modules" not in p.parts})


def test_relative_markdown_links_resolve() -> None:
    broken = []
    for doc in _files("*.md", "docs/**/*.md", "examples/**/*.md", "slurm/**/*.md"):
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_named_docs_paths_exist() -> None:
    broken = []
    for path in _files("*.md", "docs/**/*.md", "src/**/*.py", "tests/**/*.py", "sweeps/**/*.py", "scripts/**/*.py",
                       "examples/**/*.py", "examples/**/*.md", ".ci/*"):
        for name in DOCS_PATH.findall(path.read_text(encoding="utf-8")):
            if not (ROOT / name.rstrip(".")).exists():
                broken.append(f"{path.relative_to(ROOT)}: {name}")
    assert not broken, "paths to nothing:\n" + "\n".join(broken)
