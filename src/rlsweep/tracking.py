"""Weights & Biases, offline-first. Logging never kills a training job, and never leaks a secret.

Every wandb call goes through :class:`Tracker`, which catches its errors, records them in
``errors`` (they end up in the result record) and stops logging for the rest of the job. An
offline run whose file could not be written in full (disk full, unwritable folder) is found when
the run finishes and recorded the same way. Values of credential-like environment variables are
redacted from everything the job writes (:func:`scrub`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import struct
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsweep.config import LOGGER_MODES, LoggerConfig

log = logging.getLogger(__name__)


#: the history metric every other one is plotted against (see :meth:`Tracker.__init__`)
ENV_STEPS_METRIC = "train/env_steps"
#: the W&B job_type of a training job's run (the report's run is "report")
JOB_TYPE_TRAIN = "train"
#: rlsweep's defaults for what neither the config nor W&B's environment variables set
DEFAULT_MODE = "offline"
DEFAULT_PROJECT = "rlsweep"
#: every WANDB_MODE value wandb 0.31 accepts (``wandb.Settings.mode``), as the rlsweep mode it
#: means; None: valid for wandb, not run by rlsweep. wandb itself fails to start (even with an
#: explicit ``mode=``) when WANDB_MODE holds anything else, an empty value included.
_WANDB_ENV_MODES: dict[str, str | None] = {
    "offline": "offline", "online": "online", "disabled": "disabled",
    "dryrun": "offline", "run": "online",  # wandb's older names
    "shared": None,
}


@dataclass(frozen=True)
class WandbSettings:
    """Where and how a job logs to W&B, after the config and W&B's environment variables."""

    mode: str  # offline | online | disabled
    project: str
    entity: str | None  # None: the account's default one
    dir: str | None  # the folder W&B writes under (runs go to <dir>/wandb/); None: the job's own folder
    mode_source: str  # what chose the mode: logger.mode, WANDB_MODE or default


def resolved_logger(cfg: LoggerConfig, environ: Mapping[str, str] | None = None) -> WandbSettings:
    """The W&B settings of ``cfg``: each of ``mode``, ``project``, ``entity``, ``dir`` left None in
    the config comes from W&B's variable (WANDB_MODE, WANDB_PROJECT, WANDB_ENTITY, WANDB_DIR), else
    from rlsweep's default (offline, rlsweep, the account's entity, the job's folder). They are passed
    to ``wandb.init`` explicitly, so they hold where wandb was set up in the process before.

    Raises:
        ValueError: WANDB_MODE holds a value W&B or rlsweep cannot run with (the message is for the user).
    """
    env = os.environ if environ is None else environ
    raw = env.get("WANDB_MODE")
    choices = ", ".join(LOGGER_MODES)
    if cfg.mode is not None:
        mode, source = cfg.mode, "logger.mode"
        if raw is not None and raw not in _WANDB_ENV_MODES and cfg.mode != "disabled":
            raise ValueError(f"WANDB_MODE={raw!r} in the environment is not valid, and W&B does not start with it "
                             f"even with logger.mode={cfg.mode}; set it to one of: {choices}, or unset it")
    elif raw is not None:
        mode, source = _WANDB_ENV_MODES.get(raw), "WANDB_MODE"
        if mode is None:
            raise ValueError(f"WANDB_MODE={raw!r} in the environment is not valid for rlsweep; set it to one of: "
                             f"{choices}, unset it, or choose with logger.mode=...")
    else:
        mode, source = DEFAULT_MODE, "default"
    root = cfg.dir or env.get("WANDB_DIR") or None
    return WandbSettings(
        mode=mode,
        project=cfg.project or env.get("WANDB_PROJECT") or DEFAULT_PROJECT,
        entity=cfg.entity or env.get("WANDB_ENTITY") or None,
        dir=str(Path(root).expanduser().absolute()) if root else None,
        mode_source=source,
    )


def wandb_credentials_problem() -> str | None:
    """Why W&B cannot log in from here, or None when it can (no network involved).

    Uses wandb's own lookup, without prompting and without storing anything: WANDB_API_KEY (or
    WANDB_IDENTITY_TOKEN_FILE), the .netrc entry of the W&B host (NETRC, WANDB_BASE_URL and the
    settings files honoured), then the ``api_key`` of W&B's settings files.
    """
    try:
        from wandb.sdk import wandb_setup
        from wandb.sdk.lib import wbauth

        settings = wandb_setup.singleton().settings
        auth = wbauth.authenticate_session(host=settings.base_url, source="rlsweep", prompt=False,
                                           update_session=False)
    except (ImportError, AttributeError, TypeError):  # another wandb version's layout: not judged here
        return None
    except Exception as exc:  # noqa: BLE001 - e.g. AuthenticationError: a key in the wrong format
        return scrub(f"the W&B credentials found cannot be used ({type(exc).__name__}: {exc})")
    return None if auth is not None else "no W&B credentials were found"


#: environment variable names that look like they hold a credential
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|"
                          r"SIGNATURE|_PAT$|_PASS$|^PASS", re.IGNORECASE)
#: values shorter than this are not redacted (they would match everywhere: "1", "true", ...)
_MIN_SECRET_LEN = 6
REDACTED = "<redacted>"


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of the environment variables whose names look like credentials, longest first."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= _MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def scrub(value: Any, secrets: list[str] | None = None) -> Any:
    """``value`` with every secret (see :func:`secret_values`) replaced, recursively through dicts/lists."""
    secrets = secret_values() if secrets is None else secrets
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(scrub(v, secrets) for v in value)
    return value


def stable_run_id(output_dir: Path) -> str:
    """A W&B run id derived from the job's folder: a requeued or resumed job continues the same run."""
    return hashlib.sha1(str(Path(output_dir).resolve()).encode()).hexdigest()[:16]


def offline_copies(wandb_dir: Path, run_id: str) -> list[Path]:
    """The offline folders of run ``run_id`` in ``wandb_dir``, oldest first: a resumed or re-made run has one per
    part (wandb names each offline-run-<time>-<id>, plus -1, -2... when one of that second exists)."""
    copy = re.compile(rf"offline-run-\d{{8}}_\d{{6}}-{re.escape(run_id)}(-\d+)?")
    return sorted(p for p in Path(wandb_dir).glob("offline-run-*") if copy.fullmatch(p.name))


def run_group(logger_group: str | None, sweep_dir: str | os.PathLike[str] | None, output_dir: Path) -> str:
    """The W&B group of a job (the report logs into the same one): ``logger.group`` if set, else the last
    two path components of its sweep (or single-run) folder (``multirun/2026-11-29/21-00-00`` ->
    ``2026-11-29/21-00-00``), which keep the date of Hydra's folders."""
    if logger_group:
        return logger_group
    return "/".join(Path(sweep_dir or output_dir).parts[-2:])


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys as nested dicts (``{"algo.lr": 1}`` -> ``{"algo": {"lr": 1}}``), dict values merged.

    W&B's config is nested: its app shows and filters a nested key as ``algo.lr``, while a key
    that holds a dot itself cannot be filtered or grouped on (and wandb-workspaces addresses
    ``algo.lr`` as the nested key). A key that would be both a value and a folder keeps its dots.
    """
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = str(key).split(".")
        node = out
        for i, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):  # a value already sits here: keep this key flat one level up
                leaf = ".".join([*parents[i:], leaf])
                break
            node = child
        if isinstance(value, Mapping):
            value = nest(value)
            if isinstance(node.get(leaf), dict):
                node[leaf].update(value)
                continue
        node[leaf] = value
    return out


_LOG_HEADER = b":W&B"  # wandb-core's transaction log: a LevelDB-style log with this file header
_LOG_BLOCK = 32768
_LOG_CHUNK_HEADER = 7  # crc32 (4), length (2), chunk type (1)
_FLUSH_WAIT_S = 5.0  # seconds an incomplete offline run file may take to be completed after finish()


def check_offline_run(run_dir: str | Path, run_id: str) -> str | None:
    """Why the offline run in ``run_dir`` is not complete on disk, or None when it is.

    W&B writes an offline run from a helper process and does not tell the training process when
    a write fails (disk full, folder made read-only): the run file then ends early or is empty.
    A complete file is a sequence of checksummed chunks that ends with the run's exit record.
    A file in a format this check does not know is not judged.
    """
    path = Path(run_dir) / f"run-{run_id}.wandb"
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"run file unreadable: {exc}"
    if not data:
        return f"run file {path} is empty"
    if not data.startswith(_LOG_HEADER):
        return None if len(data) >= len(_LOG_HEADER) else f"run file {path} is truncated"
    last: bytes | None = None  # the last whole record: the run's exit record in a complete file
    pending = b""
    pos = _LOG_CHUNK_HEADER  # the file header takes the place of a chunk header
    while pos < len(data):
        if _LOG_BLOCK - pos % _LOG_BLOCK < _LOG_CHUNK_HEADER:  # block trailer: zero padding
            pos += _LOG_BLOCK - pos % _LOG_BLOCK
            continue
        if pos + _LOG_CHUNK_HEADER > len(data):
            return f"run file {path} ends inside a record"
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + _LOG_CHUNK_HEADER])
        chunk = data[pos + _LOG_CHUNK_HEADER:pos + _LOG_CHUNK_HEADER + length]
        if len(chunk) < length:
            return f"run file {path} ends inside a record"
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            return f"run file {path} has a corrupt record at byte {pos}"
        pos += _LOG_CHUNK_HEADER + length
        if kind in (1, 2, 3, 4):  # a full record; its first, middle or last piece
            pending += chunk
        if kind in (1, 4):
            last, pending = pending, b""
    if last is None:
        return f"run file {path} holds no records"
    try:
        from wandb.proto import wandb_internal_pb2

        record = wandb_internal_pb2.Record()
        record.ParseFromString(last)
        if record.WhichOneof("record_type") != "exit":
            return f"run file {path} ends before the run's exit record"
    except Exception:  # noqa: BLE001 - an unknown record layout: do not judge
        return None
    return None


def _internal_errors(run_dir: str | Path) -> list[str]:
    """ERROR lines of wandb-core's log for this run (when the log itself could be written)."""
    out = []
    try:
        lines = (Path(run_dir) / "logs" / "debug-internal.log").read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("level") == "ERROR":
            out.append(str(entry.get("msg")) + (f": {entry['error']}" if entry.get("error") else ""))
    return out


def init_run(run_id: str, run_root: str, *, concurrent: bool = False, save_code: bool | None = None,
             **fields: Any) -> Any:
    """``wandb.init`` of one of rlsweep's runs (a job's, the report's) with ``fields`` (mode, project, ...): under
    ``run_root``, continued by its stable ``run_id``; ``concurrent``: open beside the process's other runs."""
    import wandb

    settings = wandb.Settings(console="off",  # the job's output stays in the job's log, not in W&B
                              x_disable_stats=True,  # no sampling thread competing with the timed loop
                              disable_git=True, save_code=save_code, silent=True)
    # a job that trains several seeds (seeds_per_job) keeps one run per seed open at once
    reinit = "create_new" if concurrent else "finish_previous"
    return wandb.init(id=run_id, resume="allow", dir=run_root, reinit=reinit, settings=settings, **fields)


class Tracker:
    """One W&B run for one job -- for one seed of a job that trains several -- (or nothing, in ``disabled`` mode).

    ``settings`` come from :func:`resolved_logger`; the run is written under ``output_dir`` unless
    they name another folder. ``fields`` are :func:`init_run`'s: the run's name, group, job_type, tags, config.
    """

    def __init__(self, settings: WandbSettings, output_dir: Path, run_id: str, concurrent: bool = False,
                 **fields: Any) -> None:
        self.errors: list[str] = []
        self.run: Any = None
        self.run_dir: str | None = None
        self.run_id = run_id
        self.mode = settings.mode
        if self.mode == "disabled":
            return
        try:
            # what the user chose, with any secret in it redacted (one scrub: one read of the secrets)
            chosen = scrub({"project": settings.project, "entity": settings.entity, **fields})
            self.run = init_run(run_id, settings.dir or str(output_dir), concurrent=concurrent, save_code=False,
                                mode=self.mode, **chosen)
            self.run_dir = str(Path(self.run.dir).parent)
            # env steps are the x-axis of every logged metric (W&B's default is its own step counter)
            self.run.define_metric(ENV_STEPS_METRIC)
            self.run.define_metric("*", step_metric=ENV_STEPS_METRIC)
        except Exception as exc:  # noqa: BLE001 - logging must never stop training
            self._fail("init", exc)

    def _fail(self, what: str, exc: BaseException | str) -> None:
        msg = f"wandb {what} failed: {exc if isinstance(exc, str) else f'{type(exc).__name__}: {exc}'}"
        log.warning("%s (training continues; W&B logging stopped)", msg)
        self.errors.append(scrub(msg))
        self.run = None

    def _call(self, what: str, call: Callable[[Any], Any]) -> bool:
        """``call(run)``; False when there is no run or the call failed (W&B logging then stops)."""
        if self.run is None:
            return False
        try:
            call(self.run)
        except Exception as exc:  # noqa: BLE001 - logging must never stop training
            self._fail(what, exc)
            return False
        return True

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self._call("log", lambda run: run.log(metrics, step=step))

    def summary(self, values: dict[str, Any]) -> None:
        self._call("summary", lambda run: run.summary.update(scrub(values)))

    def preempted(self) -> None:
        """Flush and close the run now: the job is about to be requeued (the same id continues)."""
        self._call("mark_preempting", lambda run: run.mark_preempting())  # no run: both do nothing
        self.finish(failed=True)

    def finish(self, failed: bool) -> None:
        if not self._call("finish", lambda run: run.finish(exit_code=1 if failed else 0)):
            return
        self.run = None
        if self.mode == "offline" and self.run_dir:
            # wandb-core may still be writing the last records when finish() returns
            deadline = time.monotonic() + _FLUSH_WAIT_S
            while (problem := check_offline_run(self.run_dir, self.run_id)) and time.monotonic() < deadline:
                time.sleep(0.1)
            if problem:
                internal = _internal_errors(self.run_dir)
                detail = f" (wandb-core: {'; '.join(internal[:3])})" if internal else ""
                self._fail("offline write", f"{problem}: W&B data of this job is lost or partial{detail}")
