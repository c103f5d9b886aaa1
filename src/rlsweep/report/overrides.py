"""From override text and record values to cell keys: one normal form for both.

A job's Hydra overrides say ``twin_modules=True`` or ``algo.lr=3e-4``; its result record says
``True`` and ``0.0003``. Both are normalised here so they compare equal.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from rlsweep.toggles import TOGGLES


def norm_value(value: Any) -> str:
    """Normalise a toggle/override value so record values and override text compare."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    text = str(value).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    low = text.lower()
    if low in ("none", "null", "~"):
        return "none"
    if low in ("true", "false"):
        return low
    try:
        return str(int(text))
    except ValueError:
        pass
    try:
        return _float_text(float(text))
    except ValueError:
        return text


def _float_text(value: float) -> str:
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def split_override(text: str) -> tuple[str, str]:
    """``key=value`` -> (key, value); value is "" without an ``=``."""
    key, sep, value = str(text).partition("=")
    return key.strip(), value.strip() if sep else ""


def norm_key(key: str) -> str:
    """Normalise an override key: no ``+``/``~`` prefix, no ``toggles.``, ``env.id`` -> env_id."""
    k = key.strip().lstrip("+~").removeprefix("toggles.")
    return "env_id" if k == "env.id" else k


def override_signature(overrides: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """Sorted normalised (key, value) pairs: equal for the same job however it was spelled."""
    return tuple(sorted((norm_key(key), norm_value(value)) for key, value in map(split_override, overrides)))


def override_dims(overrides: Iterable[str]) -> tuple[dict[str, str], str | None]:
    """Cell dimensions and seed named by a job's overrides."""
    dims: dict[str, str] = {}
    seed = None
    for key, value in map(split_override, overrides):
        if (k := norm_key(key)) == "seed":
            seed = norm_value(value)
        elif k and k != "backend":  # a backend group is represented by backend.* dims
            dims[k] = norm_value(value)
    return dims, seed


def record_dims(record: dict[str, Any]) -> dict[str, str]:
    """Cell dimensions stated by a result record (algo, env_id, toggle values)."""
    dims = {name: norm_value(record[name]) for name in ("algo", "env_id") if record.get(name) is not None}
    toggles = record.get("toggles")
    if isinstance(toggles, dict):
        for name, entry in toggles.items():
            value = entry.get("value") if isinstance(entry, dict) else entry
            if isinstance(value, dict):
                for sub, sub_value in value.items():
                    dims[f"{name}.{sub}"] = norm_value(sub_value)
            else:
                dims[str(name)] = norm_value(value)
    return dims


def is_toggle_dim(dim: str, names: Iterable[str] = tuple(t.name for t in TOGGLES)) -> bool:
    """Whether a dimension belongs to a toggle (``backend.num_threads`` -> ``backend``)."""
    return dim.split(".", 1)[0] in names
