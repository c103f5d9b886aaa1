from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

# tests import their helpers module as `helpers`
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Everything a test run writes to the temporary folder -- pytest's tmp_path folders, the jobs' and
# wandb's scratch files, submitit's, inductor's compile cache -- goes to one folder of this session
# (also in the jobs it starts: TMPDIR is inherited), removed when the session ends: the suite
# leaves nothing behind. Compiles therefore start cold in every session, as on a fresh machine.
_SCRATCH = Path(tempfile.mkdtemp(prefix="rlsweep-tests-"))
os.environ["TMPDIR"] = tempfile.tempdir = str(_SCRATCH)


def pytest_sessionfinish(session, exitstatus) -> None:  # noqa: ARG001 - pytest's hook signature
    shutil.rmtree(_SCRATCH, ignore_errors=True)
