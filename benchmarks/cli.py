"""``python -m sweeps.bench [--quick] [--repeats N] [--out FILE] [--algos ppo,dqn,sac,atari_ppo] [--peers sb3,torchrl] [--skip-overheads] [--claims]``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None, root: Path | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sweeps.bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="tiny budgets and 2 seeds: a smoke version in minutes")
    p.add_argument("--repeats", type=int, default=None,
                   help="interleaved repeats per comparison, repeat r running seed r on every side, so also the "
                        "seeds of the learning verdict (default 10, which takes hours: docs/guide/bench.md; quick 2)")
    p.add_argument("--out", type=Path, default=None, help="write JSON here and markdown next to it (.md)")
    p.add_argument("--algos", default="ppo,dqn,sac,atari_ppo",
                   help="comma-separated subset of ppo,dqn,sac,atari_ppo (PPO with the Nature CNN on Breakout)")
    p.add_argument("--peers", default=None,
                   help="comma-separated peers to run beside rlsweep: sb3 (required: the targets are against it) "
                        "and torchrl (default: every one installed)")
    p.add_argument("--skip-overheads", action="store_true",
                   help="run only the comparisons: no raw-stepping limit, cold start or launcher timings "
                        "(minutes of their own)")
    p.add_argument("--claims", action="store_true", help="measure the claims table instead (see sweeps/claims.py)")
    args = p.parse_args(argv)
    root = root or Path(__file__).resolve().parents[1]
    if args.claims:
        from benchmarks import claims

        res = claims.run(quick=args.quick, repeats=args.repeats)
        text = claims.markdown(res)
    else:
        from benchmarks import core

        # the arguments first: a wrong one is the same mistake whatever is installed
        algos = tuple(a for a in args.algos.split(",") if a)
        unknown = set(algos) - set(core.ALGOS)
        if unknown:
            p.error(f"unknown algos {sorted(unknown)}; valid: {', '.join(core.ALGOS)}")
        installed = core.installed_peers()
        peers = tuple(x for x in args.peers.split(",") if x) if args.peers is not None else installed
        known = [q.key for q in core.PEERS]
        if set(peers) - set(known):
            p.error(f"unknown peers {sorted(set(peers) - set(known))}; valid: {', '.join(known)}")
        if args.peers is not None and "sb3" not in peers:
            p.error("--peers must include sb3: the targets are against Stable-Baselines3")
        if "sb3" not in installed:
            print('stable-baselines3 is not installed: pip install -e ".[bench]"', file=sys.stderr)
            return 2
        missing = [q for q in core.PEERS if q.key in peers and q.key not in installed]
        if missing:
            p.error(f"peer {', '.join(q.label for q in missing)} is not installed: pip install -e \".[bench]\"")
        peers = tuple(q.key for q in core.PEERS if q.key in peers)  # SB3 first: its ratios are the targets'
        repeats = args.repeats if args.repeats is not None else (2 if args.quick else 10)
        if repeats < 1:
            p.error(f"--repeats must be at least 1, got {repeats}")
        b = core.Bench(root=root, repeats=repeats, quick=args.quick, algos=algos, peers=peers,
                       overheads=not args.skip_overheads)
        res = core.run(b, log=lambda m: print(m, file=sys.stderr, flush=True))
        text = core.markdown(res)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1, default=str))
        args.out.with_suffix(".md").write_text(text)
    return 0
