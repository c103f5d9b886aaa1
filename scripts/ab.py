"""Did a change cost rlsweep's own side speed? The bench's jobs at two commits, side by side.

    python scripts/ab.py --old a6f076a --new HEAD --algos ppo,dqn,sac --pairs 4 --out /tmp/ab.json

Each commit gets a git worktree under --work; each (commit, algorithm) its own compile cache, warmed
by one run (seed 100, recorded, not counted). Then seeds 0..pairs-1, the two sides alternately
old/new and new/old, so drift on this noisy box falls on both. A job is the bench's own
(``benchmarks.core.rlsweep_args``: preset, best CPU toggles, 1 thread, full budget), run with
the worktree's code on PYTHONPATH; its end-to-end rate is over the whole process, timed from outside.
Prints and writes, per algorithm: the medians, new/old ratios with 95% bootstrap intervals over
the paired seeds, and whether the final returns are equal seed for seed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the repository's benchmarks/ before site-packages, where torchrl installs a `benchmarks` package of its own
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from benchmarks.core import COMPARISONS, TRAIN_MODULE, Bench, rlsweep_args  # noqa: E402
from rlsweep.bootstrap import ratio_with_ci  # noqa: E402


def _worktree(work: Path, side: str, rev: str) -> tuple[Path, str]:
    tree = work / side
    commit = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True,
                       capture_output=True)
    return tree, commit


def _job(tree: Path, comparison, seed: int, cache: Path, scratch: Path) -> dict:
    out = scratch / f"{tree.name}-{comparison.algo}-{seed}-{time.monotonic_ns()}"
    tmp = out.with_name(out.name + "-tmp")
    tmp.mkdir(parents=True)
    args = rlsweep_args(Bench(root=tree), comparison, seed, cache, out)
    env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{tree}", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "WANDB_MODE": "disabled", "TMPDIR": str(tmp),
           "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    env.pop("TRITON_CACHE_DIR", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", TRAIN_MODULE, *args], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=3600)
    process_s = time.perf_counter() - t0
    shutil.rmtree(tmp, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"ab: a job failed in {tree}:\n{proc.stderr[-3000:]}")
    rec = json.loads((out / "result.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    return {"seed": seed, "steady": rec["throughput"]["env_steps_per_s"],
            "e2e": rec["env_steps"] / process_s, "process_s": round(process_s, 2),
            "compile_s": rec["compile"]["compile_s"], "update_s": rec["timings"]["update"]["total_s"],
            "final_return": rec["learning"]["final_return"], "load": os.getloadavg()[0]}


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True)
    p.add_argument("--new", default="HEAD")
    p.add_argument("--algos", default="ppo,dqn,sac")
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--work", type=Path, default=Path("/tmp/ab"))
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    trees = {side: _worktree(a.work, side, rev) for side, rev in (("old", a.old), ("new", a.new))}
    scratch = a.work / "runs"
    result = {"what": __doc__.split("\n\n")[2].replace("\n", " "),
              "old": trees["old"][1], "new": trees["new"][1], "algos": {}}
    by_name = {c.algo: c for c in COMPARISONS}
    for algo in a.algos.split(","):
        c = by_name[algo]
        caches = {side: a.work / f"cache-{side}-{algo}" for side in trees}
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        warm = {side: _job(trees[side][0], c, 100, caches[side], scratch) for side in trees}
        for seed in range(a.pairs):
            order = ("old", "new") if seed % 2 == 0 else ("new", "old")
            for side in order:
                runs[side].append(_job(trees[side][0], c, seed, caches[side], scratch))
                print(algo, side, runs[side][-1], flush=True)
        summary = {}
        for key in ("steady", "e2e"):
            old = [r[key] for r in runs["old"]]
            new = [r[key] for r in runs["new"]]
            ratio, ci = ratio_with_ci(new, old, paired=True)
            summary[key] = {"old_median": _median(old), "new_median": _median(new), "ratio": ratio, "ci": ci}
        summary["returns_equal"] = [r["final_return"] for r in runs["old"]] == [r["final_return"] for r in runs["new"]]
        result["algos"][algo] = {"warmup": warm, "runs": runs, "summary": summary}
        print(algo, json.dumps(summary), flush=True)
        a.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
