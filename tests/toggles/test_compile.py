import pytest
import torch
from helpers import params_of, tiny_cfg

from rlsweep.runner import train
from rlsweep.toggles.compile import CompileToggle

from .contract import ALGOS, ToggleContract, reference_params


class TestCompile(ToggleContract):
    toggle = CompileToggle
    on = ["compile=default"]
    on_value = "default"
    # inductor fuses and reorders float math: equal up to rounding, not bit for bit
    rtol = 1e-4
    atol = 1e-5


@pytest.mark.parametrize("algo", ALGOS)
def test_compiles_only_the_selected_functions(algo: str) -> None:
    """compile.functions=[update]: the gradient step is compiled (and still matches eager), acting stays eager."""
    out = train(tiny_cfg(algo, "compile=default", "compile.functions=[update]"))
    assert set(out.compile["per_function"]) == {"update"}
    assert out.compile["per_function"]["update"]["compilations"] >= 1
    assert out.compile["graph_breaks"] == 0 and out.compile["recompiles"] == 0
    assert out.algo.act_fn.__func__ is type(out.algo)._act  # the plain bound method: not compiled
    p0 = reference_params(algo)[2]
    p1 = params_of(out.algo)
    for k in p0:
        torch.testing.assert_close(p1[k], p0[k], rtol=TestCompile.rtol, atol=TestCompile.atol)
