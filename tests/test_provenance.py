"""The record's provenance: which repository's commit ran the algorithm, asked of git only where needed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rlsweep.results import _inside_work_tree, provenance


def _git_repo(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    (path / "algo.py").write_text("x = 1\n")
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "A"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def git_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    real_run = subprocess.run

    def counting_run(args, *a, **k):  # noqa: ANN001, ANN002, ANN003 - subprocess.run's own signature
        calls.append(list(args))
        return real_run(args, *a, **k)

    monkeypatch.setattr(subprocess, "run", counting_run)
    return calls


def test_an_algorithm_of_rlsweeps_own_tree_costs_no_git_process_of_its_own(git_calls: list[list[str]]) -> None:
    from rlsweep.algos import ppo

    prov = provenance(ppo.__file__)
    if prov["code"]["rlsweep"] is None:
        pytest.skip("rlsweep does not run from a git work tree here")
    assert "algorithm" not in prov["code"]
    assert len(git_calls) == 2  # rev-parse and status of rlsweep's work tree, not again for the algorithm


def test_an_algorithm_in_another_repository_records_its_commit(tmp_path: Path) -> None:
    commit = _git_repo(tmp_path / "plugin")
    prov = provenance(tmp_path / "plugin" / "algo.py")
    assert prov["code"]["algorithm"] == {"repo": str((tmp_path / "plugin").resolve()), "commit": commit,
                                         "dirty": False}


def test_a_nested_repository_is_a_work_tree_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.delenv("GIT_WORK_TREE", raising=False)
    outer = tmp_path / "outer"
    _git_repo(outer)
    _git_repo(outer / "vendor" / "plugin")
    (outer / "pkg").mkdir()
    (outer / "pkg" / "mod.py").write_text("")
    assert _inside_work_tree(outer / "pkg" / "mod.py", str(outer))
    assert not _inside_work_tree(outer / "vendor" / "plugin" / "algo.py", str(outer))  # git -C there says plugin
    assert not _inside_work_tree(tmp_path / "elsewhere.py", str(outer))
    monkeypatch.setenv("GIT_DIR", str(outer / ".git"))  # git's search is off: ask git itself
    assert not _inside_work_tree(outer / "pkg" / "mod.py", str(outer))


def test_an_algorithm_class_without_a_source_file_records_rlsweeps_code_only() -> None:
    # a class defined in an interactive session (its module has no file): inspect raises TypeError
    interactive = type("InteractiveAlgorithm", (), {"__module__": "builtins"})
    prov = provenance(interactive)
    assert "algorithm" not in prov["code"] and set(prov) == {"code", "versions"}
    from rlsweep.algos import ppo

    assert provenance(ppo.PPO)["code"] == provenance(ppo.__file__)["code"]  # a class: its source file's code
