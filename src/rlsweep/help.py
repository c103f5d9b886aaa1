"""The parts of ``python -m sweeps.train --help`` that depend on what is installed and configured.

Hydra's app help template (``conf/hydra/help/rlsweep.yaml``) asks for them with the resolver
``${rlsweep.help:groups}``, ``toggles`` or ``docs``: Hydra's own list of groups would show the
internal ``schema/*`` groups and no toggle.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omegaconf import OmegaConf

RESOLVER = "rlsweep.help"
#: groups that are not choices: Hydra's own, and the schemas the YAML files extend
INTERNAL_GROUPS = ("hydra", "schema")
#: groups under hydra/ that users choose on the command line
HYDRA_GROUPS = ("hydra/launcher",)
#: the documentation pages the page points to, with what each answers
DOCS = (
    ("README.md", "quickstart, sweeps, Slurm, reading results"),
    ("docs/reference/toggles.md", "what each toggle changes, its settings and caveats"),
    ("docs/reference/bad-input.md", "what is checked before any job starts"),
    ("docs/guide/plugins.md", "your own algorithm (--config-dir, algo=...)"),
    ("docs/guide/measuring.md", "phases, warm-up, steady state, end to end"),
    ("docs/reference/record.md", "the result record and the report"),
    ("docs/guide/resume.md", "resuming a sweep"),
    ("docs/guide/wandb.md", "W&B runs, the sweep's workspace, uploading offline runs"),
)
_INDENT = "  "
#: the groups and options of each search path a process composed with. Hydra resolves the help template whenever
#: it merges its own config over it (every composition: each job of a sweep, each test), not only for --help;
#: listing the options deep-copies the config repository once per group (~0.2-0.4 s), so it is done once
_CHOICES: dict[tuple[tuple[str, str], ...], list[tuple[str, list[str]]]] = {}


def groups_text() -> str:
    """One line per config group a user chooses from, from the running Hydra's search path: ``group: option, ...``."""
    try:
        from hydra.core.global_hydra import GlobalHydra

        loader = GlobalHydra.instance().config_loader()
        search_path = tuple((source.provider, source.path) for source in loader.get_sources())
        if search_path not in _CHOICES:
            groups = [g for g in loader.list_groups("") if g not in INTERNAL_GROUPS]
            # rlsweep's own launcher nodes (rlsweep_*) are what the plain names run here (rlsweep.launchers.OWN_NODES)
            _CHOICES[search_path] = [(g, sorted(o for o in loader.get_group_options(g) if not o.startswith("rlsweep_")))
                                     for g in (*sorted(groups), *HYDRA_GROUPS)]
        choices = _CHOICES[search_path]
    except Exception:  # noqa: BLE001 - no running Hydra (the resolver read elsewhere): the groups of rlsweep's folder
        from rlsweep.resources import CONF_DIR

        choices = [(d.name, sorted(p.stem for p in d.glob("*.yaml"))) for d in sorted(CONF_DIR.iterdir())
                   if d.is_dir() and d.name not in INTERNAL_GROUPS]
    width = max(len(g) for g, _ in choices)
    return "\n".join(f"{_INDENT}{g + ':':<{width + 1}} {', '.join(options)}" for g, options in choices if options)


def toggles_text() -> str:
    """One line per toggle: how it is set on the command line, its values, the baseline (off) first."""
    from rlsweep.toggles import TOGGLES, text

    lines = []
    for t in TOGGLES:
        # a toggle with a config group is chosen by its group (compile=default), the others by their key
        key = t.field if dataclasses.is_dataclass(t.schema) and t.values is not None else t.key
        if t.values is None:  # a group of settings (backend.*): what turns it on
            lines.append((f"{key}.*", "e.g. " + ", ".join(t.on)))
            continue
        values = [t.off_value, *(v for v in t.values if v != t.off_value)]
        lines.append((key, " | ".join(text(v) for v in values)))
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{_INDENT}{k:<{width}}  {v}" for k, v in lines)


def docs_text() -> str:
    """The documentation pages: paths in this checkout when there is one, else in the source repository."""
    root = Path(__file__).resolve().parents[2]
    here = (root / "docs" / "reference" / "toggles.md").is_file()
    head = f"{_INDENT}(in {root})" if here else f"{_INDENT}(in rlsweep's source repository)"
    width = max(len(p) for p, _ in DOCS)
    return "\n".join([head, *(f"{_INDENT}{p:<{width}}  {what}" for p, what in DOCS)])


_SECTIONS = {"groups": groups_text, "toggles": toggles_text, "docs": docs_text}


def _resolve(section: str) -> str:
    if section not in _SECTIONS:
        raise ValueError(f"{RESOLVER}: no section {section!r}; one of {', '.join(_SECTIONS)}")
    return _SECTIONS[section]().replace("$", "$$")  # Hydra's string.Template must print a $ as it is


def register_resolver() -> None:
    """Register ``${rlsweep.help:<section>}`` with OmegaConf (idempotent)."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, _resolve, use_cache=False)
