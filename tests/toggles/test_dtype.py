import torch
from helpers import params_of, tiny_cfg

from rlsweep.runner import train
from rlsweep.toggles.dtype import DtypeToggle

from .contract import ToggleContract, initial_params


class TestDtype(ToggleContract):
    toggle = DtypeToggle
    on = ["dtype=bfloat16"]
    on_value = "bfloat16"
    # bfloat16 keeps 8 mantissa bits: single elements may round (and greedy actions flip) the
    # other way, so the whole parameter vector must stay within 25% of how far training moved it
    drift = 0.25


def test_bfloat16_in_the_single_graph_update_of_sac() -> None:
    """The bench runs SAC with bfloat16 AND its compiled one-graph update where bfloat16 matmuls are
    native: the compiled step must train like the eager bfloat16 step (autograd + torch.optim)."""
    init = initial_params("sac")
    eager = train(tiny_cfg("sac", "dtype=bfloat16"))
    compiled = train(tiny_cfg("sac", "dtype=bfloat16", "compile=default", "compile.functions=[update]"))
    assert compiled.algo.single_graph_update and not eager.algo.single_graph_update
    assert compiled.updates == eager.updates > 0
    flat = {name: torch.cat([p[k].flatten() for k in sorted(p)]) for name, p in
            (("eager", params_of(eager.algo)), ("compiled", params_of(compiled.algo)), ("init", init))}
    moved = (flat["eager"] - flat["init"]).norm()
    assert moved > 0
    assert (flat["compiled"] - flat["eager"]).norm() <= TestDtype.drift * moved
