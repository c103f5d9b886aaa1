"""Learning parity of seeds trained together against the same seeds trained alone (docs/results/seeds.md).

Reads a finished ``-m seed=... seeds_per_job=1,N`` sweep and compares the final returns of the two
cells over their seeds: the difference of means with its 95% bootstrap interval (as the bench's
parity with Stable-Baselines3, rlsweep.bootstrap.learning_difference). Grouped and separate runs of
one seed start from the same networks, envs and random streams; they drift apart only by float
rounding (a vectorised step against torch.optim's), so over many updates they are two samples of
the same learning, which is what the interval tests.

    python scripts/seeds_parity.py <sweep dir>
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlsweep.bootstrap import learning_difference
from rlsweep.records import STATUS_OK, walk_records


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sweep_dir", type=Path)
    args = parser.parse_args()
    finals: dict[int, dict[int, float]] = {}
    for _, record in walk_records(args.sweep_dir):
        if record.get("status") == STATUS_OK:
            per_job = int(record["config"].get("seeds_per_job", 1))
            finals.setdefault(per_job, {})[int(record["seed"])] = float(record["learning"]["final_return"])
    if len(finals) != 2 or 1 not in finals:
        raise SystemExit(f"{args.sweep_dir}: needs the cells seeds_per_job=1 and one other, found {sorted(finals)}")
    grouped_n = max(finals)
    alone, grouped = finals[1], finals[grouped_n]
    diff = learning_difference([grouped[s] for s in sorted(grouped)], [alone[s] for s in sorted(alone)])
    diff["includes_zero"] = diff["ci_low"] <= 0 <= diff["ci_high"]
    diff["seeds_per_job"] = grouped_n
    diff["per_seed"] = {s: {"alone": alone.get(s), "together": grouped.get(s)} for s in sorted(alone | grouped)}
    print(json.dumps(diff, indent=1))


if __name__ == "__main__":
    main()
