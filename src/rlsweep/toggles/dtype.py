"""``dtype``: mixed precision through torch.autocast (float32 = no autocast)."""

from __future__ import annotations

from typing import Any

import torch

from rlsweep.config import TrainConfig
from rlsweep.toggles.base import Runtime, Toggle

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


class DtypeToggle(Toggle):
    name = "dtype"
    off_value = "float32"

    def value(self, cfg: TrainConfig) -> Any:
        return cfg.dtype.name

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        if cfg.dtype.name == "float32":
            return
        rt.autocast_dtype = _DTYPES[cfg.dtype.name]
        # float16 gradients underflow without loss scaling; bfloat16 has float32's range
        rt.use_grad_scaler = cfg.dtype.name == "float16" and rt.is_cuda
