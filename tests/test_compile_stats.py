"""CompileStats: graph breaks and recompiles are counted per wrapped function, with dynamo's reasons.

dynamo's "eager" / "aot_eager" backends keep these fast: graph breaks and recompiles are decided by
dynamo, whatever backend compiles the graphs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch._dynamo

from rlsweep.compile_stats import MAX_REASON_CHARS, MAX_REASONS, SKIPPED_PREFIX, CompileStats, FunctionCompileStats

THIS_FILE = Path(__file__).resolve()


def _line_of(marker: str) -> int:
    """The line of this file that ends with ``marker``."""
    lines = THIS_FILE.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(marker))


def step(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    torch._dynamo.graph_break()  # <- the break
    return y + 1


def loop(x: torch.Tensor) -> torch.Tensor:
    for _ in range(2):
        x = x * 2
        torch._dynamo.graph_break()  # <- the break in a loop
    return x


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()  # also drops the stats' callbacks


def _same_file(path: str | None) -> bool:
    return path is not None and Path(path).resolve() == THIS_FILE


def test_graph_break_and_recompile_reasons_land_in_the_summary(capfd: pytest.CaptureFixture[str]) -> None:
    stats = CompileStats()
    update = stats.wrap(torch.compile(step, backend="eager", dynamic=False), "update")
    update(torch.ones(3))
    update(torch.ones(4))  # size 3 -> 4: recompiles
    update(torch.ones(4, dtype=torch.float64))  # float -> double: recompiles
    update(torch.ones(4))  # cached: nothing new
    summary = stats.summary("default")
    stats.uninstall()

    fn = summary["per_function"]["update"]
    json.dumps(fn)  # the record is JSON
    # dynamo traced past the break once per compile of `step` (3 compiles), one entry
    assert fn["graph_breaks"] == 3 and summary["graph_breaks"] == 3
    (brk,) = fn["graph_break_reasons"]
    assert "torch._dynamo.graph_break()" in brk["reason"]
    assert "Developer debug context" not in brk["reason"]
    assert _same_file(brk["file"]) and brk["line"] == _line_of("# <- the break")
    assert brk["function"] == "step" and brk["count"] == 3

    # two recompiles of `step` and two of the frame that resumes after the break
    assert fn["recompiles"] == 4 and summary["recompiles"] == 4
    reasons = {(r["reason"], r["frame"].split(" (")[0]): r for r in fn["recompile_reasons"]}
    assert ("tensor 'x' size mismatch at index 0. expected 3, actual 4", "step") in reasons
    assert ("tensor 'x' dtype mismatch. expected Float, actual Double", "step") in reasons
    resumed = [r for r in fn["recompile_reasons"] if r["frame"].startswith("torch_dynamo_resume_in_step")]
    assert len(resumed) == 2
    frame = reasons[("tensor 'x' size mismatch at index 0. expected 3, actual 4", "step")]["frame"]
    assert str(THIS_FILE) in frame or THIS_FILE.name in frame
    assert all(r["count"] == 1 for r in fn["recompile_reasons"]) and fn["reasons_dropped"] == 0

    captured = capfd.readouterr()
    assert captured.err == ""  # nothing logged on the user's console
    assert captured.out == ""


def test_a_frame_that_falls_back_to_eager_is_a_graph_break_with_its_reason(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A graph break inside a loop makes dynamo give up on the whole frame: recorded as skipped."""
    stats = CompileStats()
    act = stats.wrap(torch.compile(loop, backend="eager", dynamic=False), "act")
    act(torch.ones(3))
    act(torch.ones(3))
    fn = stats.summary("default")["per_function"]["act"]
    stats.uninstall()
    assert fn["graph_breaks"] == 1
    (brk,) = fn["graph_break_reasons"]
    assert brk["reason"].startswith(SKIPPED_PREFIX) and "graph break in loop" in brk["reason"]
    assert _same_file(brk["file"]) and brk["line"] == _line_of("# <- the break in a loop")
    assert brk["function"] == "loop"
    assert capfd.readouterr().err == ""


def test_a_recompile_limit_is_recorded_with_the_guards_that_failed() -> None:
    def scale(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * n

    stats = CompileStats()
    with torch._dynamo.config.patch(recompile_limit=2):
        update = stats.wrap(torch.compile(scale, backend="eager", dynamic=False), "update")
        for n in range(4):
            update(torch.ones(3), n)
    fn = stats.summary("default")["per_function"]["update"]
    stats.uninstall()
    # n=1 recompiled; n=2 hit the limit (dynamo gave up before the callbacks ran); n=3 runs eagerly
    assert fn["recompiles"] == 2
    assert [r["reason"].split(" ")[:3] for r in fn["recompile_reasons"]] == [["n", "==", "0"], ["n", "==", "1"]]
    (brk,) = fn["graph_break_reasons"]
    assert brk["reason"].startswith(SKIPPED_PREFIX + "Dynamo recompile limit exceeded")
    assert brk["function"] == "scale" and _same_file(brk["file"])


def test_backward_compiles_are_not_recompiles() -> None:
    """A training step compiles its backward lazily under the forward's compile id."""
    lin = torch.nn.Linear(3, 3)

    def train_step(x: torch.Tensor) -> torch.Tensor:
        loss = lin(x).pow(2).sum()
        loss.backward()  # <- breaks here
        return loss

    stats = CompileStats()
    update = stats.wrap(torch.compile(train_step, backend="aot_eager", dynamic=False), "update")
    update(torch.ones(3))
    update(torch.ones(2, 3))  # rank 1 -> 2: one recompile (forward and backward compile again)
    fn = stats.summary("default")["per_function"]["update"]
    stats.uninstall()
    assert fn["recompiles"] == 1
    assert [r["reason"] for r in fn["recompile_reasons"]] == ["tensor 'x' rank mismatch. expected 1, actual 2"]
    (brk,) = fn["graph_break_reasons"]
    assert "backward()" in brk["reason"] and brk["line"] == _line_of("# <- breaks here") and brk["count"] == 2


def test_reasons_are_bounded() -> None:
    stats = FunctionCompileStats()
    for i in range(MAX_REASONS + 5):
        stats.add_reason("recompile", {"reason": f"guard {i}", "frame": "f (x.py:1)"})
    stats.add_reason("recompile", {"reason": "guard 0", "frame": "f (x.py:1)"})
    out = stats.as_dict()
    assert len(out["recompile_reasons"]) == MAX_REASONS and out["reasons_dropped"] == 5
    assert out["recompile_reasons"][0] == {"reason": "guard 0", "frame": "f (x.py:1)", "count": 2}

    from rlsweep.compile_stats import _clip

    clipped = _clip("word " * 1000)
    assert len(clipped) == MAX_REASON_CHARS and clipped.endswith("…")


def test_functions_compiled_before_install_are_not_attributed() -> None:
    """Compilation records from before the stats existed (an earlier job in the process) are not read."""
    torch.compile(step, backend="eager", dynamic=False)(torch.ones(3))
    torch._dynamo.reset()  # frame ids start again at 0: old records must not be matched
    stats = CompileStats()
    update = stats.wrap(torch.compile(lambda x: x + 1, backend="eager", dynamic=False), "update")
    update(torch.ones(3))
    fn = stats.summary("default")["per_function"]["update"]
    stats.uninstall()
    assert fn["graph_break_reasons"] == [] and fn["recompile_reasons"] == [] and fn["graph_breaks"] == 0


def test_cudagraph_skips_are_counted_for_cudagraph_modes_only() -> None:
    """A reduce-overhead graph that runs without CUDA graphs (here: every one, there is no GPU) is counted."""
    stats = CompileStats()

    def double(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sum()

    captured = stats.wrap(torch.compile(double, mode="reduce-overhead"), "act", cudagraphs=True)
    plain = stats.wrap(torch.compile(lambda x: (x + 1).sum()), "update")
    for _ in range(3):
        captured(torch.ones(8))
        plain(torch.ones(8))
    summary = stats.summary("reduce-overhead")
    stats.uninstall()
    skips = summary["per_function"]["act"]["cudagraph_skips"]
    assert (skips >= 1) if not torch.cuda.is_available() else (skips == 0)
    assert summary["per_function"]["update"]["cudagraph_skips"] == 0
    assert summary["cudagraph_skips"] == skips


def test_cudagraph_skip_messages_are_kept_as_reasons() -> None:
    import logging

    from torch._inductor.cudagraph_utils import cudagraphs_log

    stats = CompileStats()
    run = stats.wrap(lambda: cudagraphs_log.warning("skipping cudagraphs due to mutated inputs (2 instances)"), "update")
    run()
    assert logging.getLogger(cudagraphs_log.name).isEnabledFor(logging.WARNING)
    reasons = stats.summary("reduce-overhead")["per_function"]["update"]["cudagraph_skip_reasons"]
    stats.uninstall()
    assert reasons == [{"reason": "skipping cudagraphs due to mutated inputs (2 instances)", "count": 1}]
    run()  # uninstalled: no longer listening
    assert stats.functions["update"].cudagraph_skip_reasons[("skipping cudagraphs due to mutated inputs (2 instances)",)]["count"] == 1


def test_a_compile_outside_every_wrapped_function_is_not_credited_to_the_last_one_called() -> None:
    """A compile of code rlsweep does not wrap (a plugin's own torch.compile), after a wrapped call has
    returned, is counted under ``<other>``, not under the function that ran last."""
    stats = CompileStats()
    update = stats.wrap(torch.compile(lambda x: x + 1, backend="eager", dynamic=False), "update")
    update(torch.ones(3))
    torch.compile(lambda x: x * 3, backend="eager", dynamic=False)(torch.ones(3))
    functions = stats.summary("default")["per_function"]
    stats.uninstall()
    assert functions["update"]["compilations"] == 1
    assert functions["<other>"]["compilations"] == 1


def _compiled_only(x: torch.Tensor) -> torch.Tensor:
    """x + 1 where dynamo compiled it, x where it runs as written: tells dynamo's code from the function's."""
    return x + (1 if torch.compiler.is_compiling() else 0)


class _Twice:
    def __init__(self) -> None:
        self.scale = 2.0

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return _compiled_only(x) * self.scale


def test_calling_directly_runs_dynamos_code_without_dynamo_until_the_block_ends() -> None:
    """In ``calling_directly`` a function compiled once and whole runs the code dynamo made of it (a function
    and a bound method alike), counted as direct calls; after the block its calls go through dynamo again."""
    stats = CompileStats()
    plain = stats.wrap(torch.compile(_compiled_only, backend="eager", dynamic=False), "act")
    method = stats.wrap(torch.compile(_Twice().apply, backend="eager", dynamic=False), "update")
    x = torch.ones(3)
    assert torch.equal(plain(x), x + 1) and torch.equal(method(x), (x + 1) * 2)
    with stats.calling_directly():
        for _ in range(3):
            assert torch.equal(plain(x), x + 1) and torch.equal(method(x), (x + 1) * 2)
    plain(x), method(x)
    summary = stats.summary("default")["per_function"]
    stats.uninstall()
    assert summary["act"]["direct_calls"] == 3 and summary["update"]["direct_calls"] == 3
    assert summary["act"]["compilations"] == 1 and summary["update"]["compilations"] == 1


def test_a_function_compiled_twice_or_with_a_graph_break_keeps_dynamos_path() -> None:
    """Two cache entries (two shapes) need dynamo to pick one; a graph break's resumed part needs dynamo
    to run compiled: neither is called directly, and both keep giving the compiled results."""
    stats = CompileStats()
    shapes = stats.wrap(torch.compile(_compiled_only, backend="eager", dynamic=False), "act")
    broken = stats.wrap(torch.compile(step, backend="eager", dynamic=False), "update")
    small, large = torch.ones(3), torch.ones(5)
    shapes(small), shapes(large), broken(small)
    with stats.calling_directly():
        assert torch.equal(shapes(small), small + 1) and torch.equal(shapes(large), large + 1)
        assert torch.equal(broken(small), small * 2 + 1)
    summary = stats.summary("default")["per_function"]
    stats.uninstall()
    assert summary["act"]["compilations"] == 2 and summary["update"]["graph_breaks"] == 1
    assert summary["act"]["direct_calls"] == 0 and summary["update"]["direct_calls"] == 0
