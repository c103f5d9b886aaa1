"""The talk's claims as measured verdicts on this machine ("claim / measured here / verdict").

    python -m sweeps.claims [--quick] [--out claims.json]   # same as: python -m sweeps.bench --claims

The models and batch sizes come from conf/experiment/claims.yaml; run the same toggles on whole
training jobs with: python -m sweeps.train -m experiment=claims
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.cli import main

if __name__ == "__main__":
    sys.exit(main(["--claims", *sys.argv[1:]], root=Path(__file__).resolve().parents[1]))
