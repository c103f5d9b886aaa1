"""One writer per output folder: the command that launches a sweep (or a single run) holds ``flock``
on ``<folder>/.rlsweep.lock`` until it ends, which the kernel releases however it ends (no stale
lock); job processes do not inherit it, and the file names its last holder. On some network file
systems (older NFS) flock may not exclude writers on other machines.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

from rlsweep.results import utc_now

LOCK_FILE = ".rlsweep.lock"

#: locks held by this process: folder -> open file descriptor
_HELD: dict[str, int] = {}


class FolderBusy(Exception):
    """Another command holds the folder's lock."""


def _holder(path: Path) -> str:
    """Who holds the lock at ``path``, as its holder wrote it (best effort)."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        return f"pid {info['pid']} on {info['hostname']}, since {info['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


def acquire(folder: Path) -> bool:
    """Lock ``folder`` (created if needed) for this process, or fail at once.

    Returns:
        Whether this call created the lock file (and so leaves a trace in the folder).

    Raises:
        FolderBusy: another process holds the lock; the message names it.
        OSError: the folder or its lock file cannot be created.
    """
    folder = Path(folder).absolute()
    key = str(folder)
    if key in _HELD:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FolderBusy(f"{folder} is in use by another rlsweep command ({_holder(path)}); wait for it to "
                         "end, or choose another folder") from None
    except BaseException:
        os.close(fd)
        raise
    info = {"pid": os.getpid(), "hostname": socket.gethostname(), "since": utc_now("seconds")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
    _HELD[key] = fd
    return created


def release(folder: Path, remove: bool = False) -> None:
    """Release this process's lock on ``folder``; ``remove``: delete the lock file too (a refused command)."""
    fd = _HELD.pop(str(Path(folder).absolute()), None)
    if fd is None:
        return
    try:
        if remove:
            (Path(folder).absolute() / LOCK_FILE).unlink(missing_ok=True)
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def release_all() -> None:
    """Release every lock this process holds (the end of the process does the same)."""
    for folder in list(_HELD):
        release(Path(folder))
