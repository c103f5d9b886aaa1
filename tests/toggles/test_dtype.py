from rlsweep.toggles.dtype import DtypeToggle

from .contract import ToggleContract


class TestDtype(ToggleContract):
    toggle = DtypeToggle
    on = ["dtype=bfloat16"]
    on_value = "bfloat16"
    # bfloat16 keeps 8 mantissa bits: single elements may round (and greedy actions flip) the
    # other way, so the whole parameter vector must stay within 25% of how far training moved it
    drift = 0.25
