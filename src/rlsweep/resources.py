"""Where rlsweep's own Hydra configs are, in a source checkout and in an installed package.

The repository keeps them in ``conf/`` at its root and links ``src/rlsweep/conf`` to it, so the
package finds them at ``rlsweep/conf`` in a checkout or editable install, and a wheel carries the
same files there as package data.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def conf_dir() -> Path:
    """rlsweep's Hydra config folder (the one holding ``config.yaml``): the installed package's, else the checkout's."""
    candidates = (_HERE / "conf", _HERE.parents[1] / "conf")
    for folder in candidates:
        if (folder / "config.yaml").is_file():
            return folder
    raise FileNotFoundError("rlsweep's Hydra configs are missing: no config.yaml in "
                            + " or ".join(str(c) for c in candidates) + "; reinstall rlsweep")


#: rlsweep's own config directory (see :func:`conf_dir`)
CONF_DIR = conf_dir()
