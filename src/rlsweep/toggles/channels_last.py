"""``backend.channels_last``: convolutional networks and their inputs in NHWC memory format.

A key of the ``backend`` group, but a toggle of its own: unlike the process-global backend switches
it acts on the job's networks, through the runtime, and is not applicable to a job without convolutions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlsweep.toggles.base import BoolToggle

if TYPE_CHECKING:
    import torch

    from rlsweep.config import TrainConfig


class ChannelsLastToggle(BoolToggle):
    """``backend.channels_last``: convolutional networks and their inputs in NHWC memory format."""

    # the name is the key users type: the report's cell dimension and the W&B column match the override
    name = "backend.channels_last"
    field = "backend.channels_last"  # dotted: declared by the backend group's schema (BackendConfig)

    def not_applicable(self, cfg: TrainConfig, device: torch.device) -> str | None:
        if not cfg.backend.channels_last:
            return None
        # first: why the job builds no convolutional network
        encoder = getattr(cfg.algo, "encoder", None)
        if encoder is None:
            return (f"not applicable: {cfg.algo.name} has no algo.encoder, so no convolutional network "
                    f"(channels_last acts on convolutions)")
        if encoder == "mlp":
            return "not applicable: algo.encoder=mlp builds no convolutional network"
        if encoder == "auto":
            from rlsweep.envs import observation_space
            from rlsweep.nets import is_image_shape

            space = observation_space(cfg.env)
            if not is_image_shape(space.shape, space.dtype):
                return (f"not applicable: {cfg.env.id} observations are not images ({space.dtype} {space.shape}), "
                        f"so algo.encoder=auto builds an MLP, no convolutional network")
        if cfg.seeds_per_job > 1:
            # under vmap a tensor has no memory format of its own (contiguous(memory_format=...) is
            # not implemented there): the seeds' convolutions run as torch.vmap lays them out
            return ("not applicable: seeds_per_job > 1 runs the seeds' convolutions through torch.vmap, "
                    "which keeps no channels_last (NHWC) layout")
        return None
