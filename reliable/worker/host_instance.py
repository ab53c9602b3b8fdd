"""This host's instance id: a random id per kernel boot, kept on the host, that tells clones apart.

Virtual machines restored from one memory snapshot share the host name and the kernel's boot id,
the evidence a worker uses to decide that a recorded process is on its own host (and so that a
pid gone here means that process is dead). Each worker process therefore also records the host's
instance id: a random id the first process of a boot writes to ``reliable-host-<boot id>`` in the
system's temporary directory (created atomically, mode 0644, readable by every user's workers) and
every later process of that boot reads. Two clones write their own ids after the restore, so
neither takes the other's pids for its own.

What this assumes (docs/worker.md, "Worker processes on record"): the file is created after the
clone, i.e. no worker ran on the machine the snapshot was taken of (or the restore deletes
``reliable-host-*`` from the temporary directory), and the workers of one host share that
directory (a service with its own private /tmp has its own id: it never releases another
service's leases early, which is safe).
"""

from __future__ import annotations

import logging
import os
import re
import stat
import tempfile
import uuid

__all__ = ["host_instance", "instance_path"]

logger = logging.getLogger("reliable.leases")

_VALID = re.compile(r"[0-9a-f]{32}")


def instance_path(boot: str, directory: str | None = None) -> str:
    """The file that holds the instance id of boot `boot` (in `directory`, default the system's
    temporary directory)."""
    return os.path.join(directory or tempfile.gettempdir(), f"reliable-host-{boot}")


def _read(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        text = os.read(fd, 128).decode("ascii", errors="replace").strip()
    finally:
        os.close(fd)
    if not _VALID.fullmatch(text):
        raise ValueError("not an instance id (32 lower-case hex digits)")
    return text


def _create(path: str) -> None:
    """Write a new id to `path` unless another process did first: written to a private name, then
    linked to `path` (a link fails if `path` exists), so nobody reads a half-written file."""
    temporary = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(fd, 0o644)  # whatever the umask: every user's workers read it
        os.write(fd, f"{uuid.uuid4().hex}\n".encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass  # another process of this boot created it first: its id is the host's
    finally:
        os.unlink(temporary)


def host_instance(boot: str | None, directory: str | None = None) -> str | None:
    """The instance id of this host for kernel boot `boot`, created if this is the first process to
    ask; None (no early release of anyone's leases) without a boot id or when the file cannot be
    read or made (logged)."""
    if boot is None:
        return None
    path = instance_path(boot, directory)
    try:
        try:
            return _read(path)
        except FileNotFoundError:
            _create(path)
            return _read(path)
    except (OSError, ValueError) as exc:
        logger.warning("no host instance id (%s: %s): leases of dead processes on this host expire by their TTL",
                       path, exc)
        return None
