"""Child-process entry of the bench: ``python -m benchmarks.worker KIND JSON_ARGS OUT_FILE``.

Every measured run gets a fresh process (no shared compile caches, allocator or thread state).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    kind, args, out = argv[0], json.loads(argv[1]), Path(argv[2])
    from benchmarks import peers

    if kind == "sb3":
        result = peers.run_sb3(**args)
    elif kind == "torchrl":
        from benchmarks.torchrl_peer import run_torchrl

        result = run_torchrl(**args)
    elif kind == "limit":
        result = peers.raw_vector_stepping(**args)
    else:
        raise SystemExit(f"unknown worker kind {kind!r}: sb3 | torchrl | limit")
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
