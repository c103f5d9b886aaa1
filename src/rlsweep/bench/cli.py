"""``python -m sweeps.bench [--quick] [--repeats N] [--out FILE] [--algos ppo,dqn,sac] [--claims]``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None, root: Path | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sweeps.bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="tiny budgets: a smoke version in about a minute")
    p.add_argument("--repeats", type=int, default=None, help="interleaved repeats per comparison (default 3; quick 1)")
    p.add_argument("--out", type=Path, default=None, help="write JSON here and markdown next to it (.md)")
    p.add_argument("--algos", default="ppo,dqn,sac", help="comma-separated subset of ppo,dqn,sac")
    p.add_argument("--claims", action="store_true", help="measure the claims table instead (see sweeps/claims.py)")
    args = p.parse_args(argv)
    root = root or Path(__file__).resolve().parents[3]
    if args.claims:
        from rlsweep.bench import claims

        res = claims.run(quick=args.quick, repeats=args.repeats)
        text = claims.markdown(res)
    else:
        if importlib.util.find_spec("stable_baselines3") is None:
            print('stable-baselines3 is not installed: pip install -e ".[bench]"', file=sys.stderr)
            return 2
        from rlsweep.bench import core

        algos = tuple(a for a in args.algos.split(",") if a)
        unknown = set(algos) - {"ppo", "dqn", "sac"}
        if unknown:
            p.error(f"unknown algos {sorted(unknown)}; valid: ppo, dqn, sac")
        repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
        b = core.Bench(root=root, repeats=repeats, quick=args.quick, algos=algos)
        res = core.run(b, log=lambda m: print(m, file=sys.stderr, flush=True))
        text = core.markdown(res)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1, default=str))
        args.out.with_suffix(".md").write_text(text)
    return 0
