"""Per-function compile accounting: compile time, graph breaks and recompiles.

torch._dynamo calls registered start/end callbacks around every frame compilation, with a
compile id ``"<frame>/<attempt>"`` (attempt > 0 is a recompile). Each compiled function is
wrapped so the callbacks know which function is running; the wrapper costs one attribute store
per call. A call during which any compilation happened counts as compile time (its whole
duration, which includes the lazily compiled backward), never as steady-state time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# torch._dynamo is imported where it is used, not here: importing it costs ~1 s (sympy, inductor,
# torch.distributed) and eager jobs, which never wrap a function, must not pay that at start-up


@dataclass
class FunctionCompileStats:
    compile_s: float = 0.0
    compilations: int = 0
    recompiles: int = 0
    graph_breaks: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "compile_s": round(self.compile_s, 6),
            "compilations": self.compilations,
            "recompiles": self.recompiles,
            "graph_breaks": self.graph_breaks,
        }


def _graph_break_count() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


class CompileStats:
    """Collects compile statistics of the functions wrapped through :meth:`wrap`."""

    def __init__(self) -> None:
        self.functions: dict[str, FunctionCompileStats] = {}
        self.events = 0
        self._current: str | None = None
        self._breaks_at_start = 0
        self._installed = False

    # dynamo callbacks ------------------------------------------------------------------------
    def _on_start(self, args: Any = None) -> None:
        self._breaks_at_start = _graph_break_count()

    def _on_end(self, args: Any = None) -> None:
        self.events += 1
        stats = self.functions.setdefault(self._current or "<other>", FunctionCompileStats())
        stats.compilations += 1
        compile_id = str(getattr(args, "compile_id", "0/0"))
        attempt = compile_id.split("/")[-1]
        if attempt.isdigit() and int(attempt) > 0:
            stats.recompiles += 1
        stats.graph_breaks += _graph_break_count() - self._breaks_at_start

    def install(self) -> None:
        if not self._installed:
            import torch._dynamo

            torch._dynamo.callback_handler.register_start_callback(self._on_start)
            torch._dynamo.callback_handler.register_end_callback(self._on_end)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            import torch._dynamo

            torch._dynamo.callback_handler.remove_start_callback(self._on_start)
            torch._dynamo.callback_handler.remove_end_callback(self._on_end)
            self._installed = False

    # wrapping --------------------------------------------------------------------------------
    def wrap(self, compiled: Callable[..., Any], name: str) -> Callable[..., Any]:
        self.install()
        self.functions.setdefault(name, FunctionCompileStats())
        stats_owner = self

        def call(*args: Any, **kwargs: Any) -> Any:
            events = stats_owner.events
            stats_owner._current = name
            t0 = time.perf_counter()
            out = compiled(*args, **kwargs)
            if stats_owner.events != events:
                stats_owner.functions[name].compile_s += time.perf_counter() - t0
            return out

        call.__wrapped__ = compiled  # type: ignore[attr-defined]
        call.__name__ = f"compiled_{name}"
        return call

    def all_compiled(self) -> bool:
        """Whether every wrapped function has compiled at least once."""
        return bool(self.functions) and all(f.compilations > 0 for f in self.functions.values())

    def total_compile_s(self) -> float:
        return sum(v.compile_s for v in self.functions.values())

    def summary(self, mode: str) -> dict[str, Any]:
        per_fn = {k: v.as_dict() for k, v in self.functions.items()}
        return {
            "mode": mode,
            "compile_s": round(self.total_compile_s(), 6),
            "graph_breaks": sum(v.graph_breaks for v in self.functions.values()),
            "recompiles": sum(v.recompiles for v in self.functions.values()),
            "per_function": per_fn,
        }
