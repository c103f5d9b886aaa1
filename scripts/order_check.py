"""Does a sweep's answer depend on the order of its cells? Run it with the cells listed both ways.

    python scripts/order_check.py --out /tmp/order -- compile=none,default twin_modules=false,true seed=0,1 \
        total_env_steps=8192
    python scripts/order_check.py --prepare false ...   # the same, without the sweep's preparation

The swept keys' values are listed as given, then each reversed (the seeds as given); ``--rounds 2`` runs
the orders ABBA (as listed, reversed, reversed, as listed), so that a change of the machine's speed between
runs, which moves every ratio that has a fixed cost in it, shows as two runs of one order disagreeing. Each
run starts from an empty compile cache (its own XDG_CACHE_HOME) and an empty /tmp (its own TMPDIR),
as on a fresh node. Prints, per cell and order: the steady and end-to-end ratios with their 95%
intervals, the timed jobs' compile seconds and the cell's cold compile, and the report's flags;
writes the same as JSON to <out>/order_check.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _reversed_sweeps(overrides: list[str]) -> list[str]:
    """Every swept key's values (``key=a,b``) listed the other way round, but the seeds'."""
    out, done = [], False
    for o in overrides:
        key, sep, value = o.partition("=")
        if sep and "," in value and key != "seed":
            value = ",".join(reversed(value.split(",")))
            done = True
        out.append(f"{key}{sep}{value}")
    if not done:
        raise SystemExit("order_check: no swept key (key=a,b) other than seed among the overrides")
    return out


def _run(overrides: list[str], folder: Path, prepare: str) -> dict:
    tmp, cache, sweep = folder / "tmp", folder / "cache", folder / "sweep"
    tmp.mkdir(parents=True)
    env = {**os.environ, "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(cache)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    command = [sys.executable, "-m", "sweeps.train", "-m", *overrides, f"prepare={prepare}", "logger.mode=disabled",
               "progress=false", f"hydra.sweep.dir={sweep}"]
    t0 = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"order_check: the sweep failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    report = json.loads((sweep / "report" / "report.json").read_text())
    return {"command": " ".join(command[1:]), "sweep_s": round(time.perf_counter() - t0, 1),
            "tmp_inductor_folders": sorted(p.name for p in tmp.glob("torchinductor_*")),
            "cells": {c["label"]: {k: c.get(k) for k in (
                "ratio", "ci_low", "ci_high", "end_to_end_ratio", "end_to_end_ci_low", "end_to_end_ci_high",
                "compile_s", "cold_compile_s", "break_even_env_steps", "flags", "start_states")}
                for c in report["cells"]}}


def _interval(value: float | None, low: float | None, high: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" + (f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="a new folder for the runs")
    parser.add_argument("--prepare", default="true", choices=["true", "false"])
    parser.add_argument("--rounds", type=int, default=1, help="runs of each order, alternating ABBA (default 1)")
    parser.add_argument("overrides", nargs="+")
    args = parser.parse_args()
    orders = {"as listed": args.overrides, "reversed": _reversed_sweeps(args.overrides)}
    plan = [name for k in range(args.rounds) for name in (list(orders) if k % 2 == 0 else list(orders)[::-1])]
    runs = [f"{name} #{plan[:i + 1].count(name)}" if args.rounds > 1 else name for i, name in enumerate(plan)]
    results = {}
    for run, name in zip(runs, plan):
        results[run] = _run(orders[name], args.out / run.replace(" ", "_").replace("#", ""), args.prepare)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "order_check.json").write_text(json.dumps({"prepare": args.prepare, "runs": results}, indent=1))
    print(f"prepare={args.prepare}; {' '.join(args.overrides)}")
    print(f"{'cell':<40} {'order':<13} {'steady':>20} {'end to end':>20} {'compile s':>9} {'cold s':>7}  flags")
    for label in next(iter(results.values()))["cells"]:
        for name, run in sorted(results.items()):
            c = run["cells"].get(label, {})
            cold = f"{c['cold_compile_s']:.1f}" if c.get("cold_compile_s") is not None else "-"
            comp = f"{c['compile_s']:.2f}" if c.get("compile_s") is not None else "-"
            print(f"{label:<40} {name:<13} {_interval(c.get('ratio'), c.get('ci_low'), c.get('ci_high')):>20} "
                  f"{_interval(c.get('end_to_end_ratio'), c.get('end_to_end_ci_low'), c.get('end_to_end_ci_high')):>20}"
                  f" {comp:>9} {cold:>7}  {','.join(c.get('flags') or []) or '-'}")
    for name, run in results.items():
        print(f"{name}: sweep {run['sweep_s']} s; inductor folders in /tmp: {run['tmp_inductor_folders'] or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
