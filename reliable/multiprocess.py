"""The application's metrics directory: how the workers' counters reach `reliable exporter` with no set-up.

Dramatiq runs several worker processes; each keeps its counters in its own files of one
prometheus_client multiprocess directory, and the exporter adds them up. `reliable worker` and
`reliable exporter` agree on that directory by default: ``$PROMETHEUS_MULTIPROC_DIR`` when set,
else one directory per application under ``/tmp/reliable-metrics-<uid>`` (`user_dir`, one per user
and host, created private). `reliable worker APP` names its directory from the app and the
directory it is imported from (`app_dir`); each worker process marks the directory with the store
it works for (`mark_store`: a file ``store-<digest of the database's location>``), and an exporter
on its defaults serves the directories marked with its own store (`store_dirs`), so two
applications run by one user never serve each other's series. The supervisor `join`s its
directory before starting its children (they inherit the variable), and its own counters
(restarts) are written there too, so one scrape of the exporter has every series the shipped rules
use.

Dead processes' files are compacted, never dropped (`compact`): their counters and histograms are
added into one ``<type>_merged.db`` file and their gauges removed, so a sum never goes down (a
decrease would read as a counter reset, and `increase()` would fire the alerts) and the number of
files stays bounded however often children are recycled. The exporter compacts before each scrape
and the supervisor after each child exit, both under an exclusive lock on ``.lock`` in the
directory; the exporter reads under the same lock, so it never sees a file counted twice or not at
all. One directory serves processes of one PID namespace (same host, not separate containers):
liveness is `kill(pid, 0)`. Folded totals stay until the directory is deleted (docs/observability.md).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import stat
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

from prometheus_client import values
from prometheus_client.metrics_core import Metric
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from .compat.prometheus_internals import multiprocess_values
from .errors import ConfigError

__all__ = ["ENV", "Directories", "HostCollector", "app_dir", "compact", "default_dir", "join", "mark_store", "prepare",
           "store_dirs", "store_key", "user_dir"]

logger = logging.getLogger(__name__)

#: The variable prometheus_client reads (and every process of the host inherits).
ENV = "PROMETHEUS_MULTIPROC_DIR"
_SUMMED = ("counter", "histogram", "summary")  # types whose values add up across processes
_MERGED = "merged"  # the pid part of the compacted files' names


def user_dir() -> Path:
    """``/tmp/reliable-metrics-<uid>``: this user's applications' directories, private."""
    return Path("/tmp") / f"reliable-metrics-{os.getuid()}"


def app_dir(app: str, path: str | os.PathLike[str] = ".") -> Path:
    """The default directory of application `app` (what `reliable worker` takes: ``module`` or
    ``module:attribute``) imported from `path`: ``<user_dir>/<module>-<digest>``, the digest of the
    module and the absolute path, so two apps (even two ``tasks`` modules of two projects) differ."""
    module = app.partition(":")[0]
    digest = hashlib.sha256(f"{os.path.abspath(path)}\0{app}".encode()).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", module)[:48] or "app"
    return user_dir() / f"{slug}-{digest}"


def default_dir(app: str, path: str | os.PathLike[str] = ".") -> Path:
    """``$PROMETHEUS_MULTIPROC_DIR`` when set, else `app_dir(app, path)`."""
    given = os.environ.get(ENV)
    return Path(given) if given else app_dir(app, path)


def store_key(location: str) -> str:
    """A short digest of a store's database location (`reliable.store.db.database_location`: no
    credentials in it), the name of the marker of the directories holding that store's metrics."""
    return hashlib.sha256(location.encode()).hexdigest()[:16]


def mark_store(directory: Path | str, location: str) -> None:
    """Mark `directory` as holding metrics of the store whose database is at `location` (`store_dirs`
    finds it). A failure is logged: an exporter on its defaults then does not find these metrics."""
    marker = Path(directory) / f"store-{store_key(location)}"
    try:
        marker.touch(exist_ok=True)
    except OSError as exc:
        logger.warning("could not mark the metrics directory %s with this store (%s): an exporter on its "
                       "defaults will not serve this process's metrics", directory, exc)


def store_dirs(location: str) -> list[Path]:
    """The application directories under `user_dir` marked with the store at `location` (`mark_store`)."""
    marker = f"store-{store_key(location)}"
    try:
        found = [d for d in user_dir().iterdir() if d.is_dir() and not d.is_symlink() and (d / marker).exists()]
    except FileNotFoundError:
        return []
    return sorted(found)


def _check_ours(directory: Path, info: os.stat_result) -> None:
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise ConfigError(f"metrics directory {directory} belongs to uid {info.st_uid} or is writable by "
                          f"others: remove it, or set {ENV} to a directory of yours")


def prepare(path: Path | str) -> Path:
    """Create the directory `path` (private, mode 0700) if missing, and check that it can be trusted.

    A directory in /tmp that someone else made (or a symlink) could feed the exporter made-up
    values or read the workers' ones: a default one (`user_dir` and the app directories in it) must
    be ours and not writable by others. A directory named on purpose (the variable,
    --multiprocess-dir) may be shared between users.
    """
    directory = Path(path)
    default = not os.environ.get(ENV) and user_dir() in (directory, directory.parent)
    checked = [user_dir(), directory] if default and directory != user_dir() else [directory]
    for each in checked:
        try:
            each.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.lstat(each)
        except OSError as exc:
            raise ConfigError(f"metrics directory {each}: {exc.strerror or exc}") from None
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"metrics directory {each} is not a directory (a symlink or a file)")
        if default:
            _check_ours(each, info)
    return directory


def join(path: Path | str) -> Path:
    """Make this process (and the processes it starts) keep its metrics in `path` (`prepare`d).

    Sets the variable and switches prometheus_client to its multiprocess values if it was
    imported before: collectors created from now on write their values to `path`.
    """
    directory = prepare(path)
    os.environ[ENV] = str(directory)
    if not multiprocess_values():
        values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
    return directory


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    with open(directory / ".lock", "a+b") as lock:  # closing it releases the lock
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _dead_files(directory: Path) -> list[tuple[Path, str]]:
    """(file, type) of every value file of a process that is gone."""
    found = []
    for file in sorted(directory.glob("*.db")):
        parts = file.stem.split("_")
        pid = parts[-1]
        if len(parts) < 2 or not pid.isdigit() or int(pid) <= 0 or _alive(int(pid)):
            continue
        found.append((file, parts[0]))
    return found


def _merge(file: Path, into: Path) -> None:
    try:  # read it all first: a file that cannot be read adds nothing, rather than half of itself
        found = list(MmapedDict.read_all_values_from_file(str(file)))  # type: ignore[no-untyped-call]
    except (OSError, ValueError, RuntimeError, struct.error) as exc:  # RuntimeError: "file is corrupted"
        logger.warning("metrics file %s is unreadable (%s: %s): set aside, its values are not counted",
                       file, type(exc).__name__, exc)
        file.rename(file.with_suffix(".unreadable"))
        return
    target = MmapedDict(str(into))  # type: ignore[no-untyped-call]
    try:
        for key, value, timestamp, _ in found:
            total, latest = target.read_value(key)  # type: ignore[no-untyped-call]
            target.write_value(key, total + value, max(latest, timestamp))  # type: ignore[no-untyped-call]
    finally:
        target.close()  # type: ignore[no-untyped-call]


def _compact(directory: Path) -> int:
    dead = _dead_files(directory)
    for file, kind in dead:
        if kind in _SUMMED:
            _merge(file, directory / f"{kind}_{_MERGED}.db")
        file.unlink(missing_ok=True)  # a gauge of a dead process no longer counts (and `live*` ones never did)
    return len(dead)


def compact(path: Path | str) -> int:
    """Fold the files of processes that are gone into the merged files; return how many were folded.

    Counters, histograms and summaries are added into ``<type>_merged.db``; gauges are removed.
    A directory we may not write to (another user's workers) is left as it is.
    """
    directory = Path(path)
    try:
        with _locked(directory):
            return _compact(directory)
    except PermissionError:
        return 0


#: What `HostCollector` reads: one directory, or a function giving the directories at each scrape.
Directories = Path | str | Callable[[], Sequence[Path]]


class HostCollector(Collector):
    """The processes' values in `paths` (one directory, or a function giving the directories at each
    scrape), added up, compacted first, read under each directory's lock."""

    def __init__(self, paths: Directories) -> None:
        self._paths = paths

    def directories(self) -> list[Path]:
        """The directories read at this scrape."""
        return sorted(Path(p) for p in self._paths()) if callable(self._paths) else [Path(self._paths)]

    def collect(self) -> Iterable[Metric]:
        """Every family of the directories' files (`compact`ed first when we may)."""
        files: list[str] = []
        with ExitStack() as locks:
            for directory in self.directories():  # sorted: two readers take the locks in one order
                try:
                    lock = locks.enter_context(open(directory / ".lock", "a+b"))
                except PermissionError:  # a directory we may only read: nothing to compact, no lock to take
                    files.extend(str(f) for f in sorted(directory.glob("*.db")))
                    continue
                except FileNotFoundError:  # gone since it was listed
                    continue
                fcntl.flock(lock, fcntl.LOCK_EX)
                with suppress(PermissionError):
                    _compact(directory)
                files.extend(str(f) for f in sorted(directory.glob("*.db")))
            return list(MultiProcessCollector.merge(files, accumulate=True))  # type: ignore[no-untyped-call]
