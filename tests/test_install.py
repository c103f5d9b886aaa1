"""``pip install .`` (not editable): the console scripts work from any folder with the configs the wheel carries.

The slow test builds the wheel from a copy of the checkout (the build writes ``build/`` and
``*.egg-info`` next to the sources; the shared checkout stays as it is), installs it into a fresh
virtual environment that sees this interpreter's packages (torch is not installed again) and runs
``rlsweep-train``, ``rlsweep-report``, ``rlsweep-status`` and Hydra's shell
completion from a folder outside the checkout, checking that the installed package, not the
checkout's (this interpreter may have an editable install of it), is the one that runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT
from omegaconf import OmegaConf

from rlsweep.records import read_result

SCRIPTS = ("rlsweep-train", "rlsweep-report", "rlsweep-status")


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_wheel_carries_every_config_and_the_editable_install_stays_a_path() -> None:
    """conf/ reaches the package through the link src/rlsweep/conf, with no package-dir mapping.

    A mapping would turn an editable install into setuptools' import hook, and Hydra's scan of the
    hydra_plugins namespace would no longer find rlsweep's launchers (seen in a fresh venv).
    """
    import os

    setuptools = _pyproject()["tool"]["setuptools"]
    link = ROOT / "src" / "rlsweep" / "conf"
    assert link.is_symlink() and os.readlink(link) == "../../conf"
    assert "package-dir" not in setuptools and setuptools["packages"]["find"]["where"] == ["src"]
    assert {"conf/*.yaml", "conf/**/*.yaml"} <= set(setuptools["package-data"]["rlsweep"])
    others = [p for p in (ROOT / "conf").rglob("*") if p.is_file() and p.suffix != ".yaml"]
    assert others == [], "conf/ files the wheel would not carry (package-data globs are *.yaml)"
    scripts = _pyproject()["project"]["scripts"]
    assert set(scripts) == set(SCRIPTS)
    assert all(target.startswith("rlsweep.commands:") for target in scripts.values())


def test_the_checkout_runs_with_its_own_conf() -> None:
    from rlsweep.resources import CONF_DIR

    assert CONF_DIR.resolve() == ROOT / "conf"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with rlsweep installed from a wheel (no editable install, no download)."""
    base = tmp_path_factory.mktemp("install")
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", "build", "dist", "outputs", "multirun", "wandb", ".*cache", ".venv"))
    env_dir = base / "venv"
    # without a pip of its own: ensurepip would also put an old setuptools in front of this interpreter's
    # (no bdist_wheel); this interpreter's pip installs into the venv and leaves the outer packages alone
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
                   check=True, timeout=300)
    pip = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--no-deps",
                          "--no-build-isolation", "--no-input", "--disable-pip-version-check", str(source)],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return env_dir


def _run(venv: Path, cwd: Path, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    full.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(venv), **(env or {}))
    return subprocess.run(list(args), cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_the_installed_package_is_the_one_that_runs(venv: Path, tmp_path: Path) -> None:
    code = ("import json, rlsweep, rlsweep.train, hydra_plugins.rlsweep_launcher as p; "
            "from rlsweep.resources import CONF_DIR; "
            "print(json.dumps([rlsweep.__file__, p.__file__, str(CONF_DIR), rlsweep.train.main.__module__]))")
    proc = _run(venv, tmp_path, str(venv / "bin" / "python"), "-c", code)
    assert proc.returncode == 0, proc.stderr
    package, plugin, conf, _ = json.loads(proc.stdout)
    for path in (package, plugin, conf):
        assert Path(path).resolve().is_relative_to(venv.resolve()), path
    assert (Path(conf) / "config.yaml").is_file()
    for script in SCRIPTS:
        assert (venv / "bin" / script).is_file()


@pytest.mark.slow
def test_console_scripts_train_report_status_from_another_folder(venv: Path, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    train = _run(venv, tmp_path, "rlsweep-train", "experiment=smoke", "total_env_steps=512", "logger.mode=disabled",
                 "progress=false", "-m", "seed=0", f"hydra.sweep.dir={sweep}")
    assert train.returncode == 0, train.stdout + train.stderr
    record = read_result(sweep / "0")
    assert record["status"] == "ok"
    assert record["env_steps"] > 0
    # composed from the configs the wheel carries, not the checkout's
    sources = OmegaConf.load(sweep / "0" / ".hydra" / "hydra.yaml").hydra.runtime.config_sources
    main = next(s.path for s in sources if s.provider == "main")
    assert Path(main).resolve().is_relative_to(venv.resolve()) and main.endswith("/site-packages/rlsweep/conf")
    assert (sweep / "report" / "summary.csv").is_file()  # the sweep's report, written at its end

    (sweep / "report" / "summary.csv").unlink()
    report = _run(venv, tmp_path, "rlsweep-report", str(sweep), "--no-plots", "--no-wandb")
    assert report.returncode == 0, report.stdout + report.stderr
    assert (sweep / "report" / "summary.csv").is_file()

    status = _run(venv, tmp_path, "rlsweep-status", str(sweep), "--no-slurm")
    assert status.returncode == 0, status.stdout + status.stderr  # its one job is ok
    assert "ok" in status.stdout
    helped = _run(venv, tmp_path, "rlsweep-status", "--help")
    assert helped.returncode == 0 and "usage:" in helped.stdout, helped.stderr


@pytest.mark.slow
def test_hydra_shell_completion_of_rlsweep_train(venv: Path, tmp_path: Path) -> None:
    install = _run(venv, tmp_path, "rlsweep-train", "--shell-completion", "install=bash")
    assert install.returncode == 0, install.stderr
    assert "complete -o nospace -o default -F hydra_bash_completion rlsweep-train" in install.stdout
    # Hydra's query: the config groups, and a group's options
    line = "rlsweep-train "
    groups = _run(venv, tmp_path, "rlsweep-train", "-sc", "query=bash",
                  env={"COMP_LINE": line, "COMP_POINT": str(len(line))})
    assert groups.returncode == 0, groups.stderr
    assert {"algo=", "compile=", "dtype=", "env=", "experiment="} <= set(groups.stdout.split())
    # through bash itself, as a user's shell completes `rlsweep-train compile=<TAB>`
    script = ('eval "$(rlsweep-train -sc install=bash)"\n'
              'COMP_LINE="rlsweep-train compile="; COMP_POINT=${#COMP_LINE}; COMP_WORDS=(rlsweep-train compile=); '
              'COMP_CWORD=1\nhydra_bash_completion\nprintf "%s\\n" "${COMPREPLY[@]}"\n')
    completed = _run(venv, tmp_path, "bash", "-c", script)
    assert completed.returncode == 0, completed.stderr
    assert {"compile=none", "compile=default", "compile=max-autotune"} <= set(completed.stdout.split())
