"""``dtype``: mixed precision through torch.autocast (float32 = no autocast; float16 on CUDA adds a GradScaler)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlsweep.toggles.base import Toggle

if TYPE_CHECKING:
    from rlsweep.config import TrainConfig
    from rlsweep.runtime import Runtime

DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class DtypeConfig:
    """Autocast compute dtype; float32 means no autocast."""

    name: str = "float32"


class DtypeToggle(Toggle):
    """``dtype``: forwards and losses under bfloat16 or float16 autocast (float16 with a GradScaler on CUDA)."""

    name = "dtype"
    schema = DtypeConfig
    key = "dtype.name"
    values = DTYPES
    off_value = "float32"
    on = ("dtype=bfloat16",)

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        if cfg.dtype.name == "float32":
            return
        import torch

        rt.settings.autocast_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}[cfg.dtype.name]
        # float16 gradients underflow without loss scaling; bfloat16 has float32's range
        rt.settings.use_grad_scaler = cfg.dtype.name == "float16" and rt.is_cuda
