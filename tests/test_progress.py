"""The progress bar: on a terminal, off in logs (Slurm, submitit), unless ``progress`` says otherwise."""

from __future__ import annotations

import io
import sys

import pytest
from helpers import tiny_cfg

from rlsweep.runner import train


class Terminal(io.StringIO):
    """stderr as a terminal."""

    def isatty(self) -> bool:
        return True


class Log(io.StringIO):
    """stderr redirected to a file (a Slurm or submitit log)."""

    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize(("progress", "stream", "shown"), [
    ("null", Terminal, True),  # the default
    ("null", Log, False),
    ("true", Log, True),
    ("false", Terminal, False),
], ids=["default-terminal", "default-log", "forced-on-in-a-log", "forced-off-on-a-terminal"])
def test_the_bar_shows_on_a_terminal_unless_told(progress: str, stream: type[io.StringIO], shown: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tiny_cfg("ppo", f"progress={progress}")
    err = stream()
    monkeypatch.setattr(sys, "stderr", err)
    train(cfg)
    assert ("ppo CartPole-v1" in err.getvalue()) is shown, err.getvalue()


def test_progress_is_unset_by_default() -> None:
    from helpers import compose_cfg

    assert compose_cfg([]).progress is None
