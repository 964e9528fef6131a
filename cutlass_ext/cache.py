"""The on-disk build cache: entries appear whole or not at all, and a damaged entry is rebuilt, not loaded.

An entry is a directory holding `manifest.json`, written last, which records the entry's key and the SHA-256
of its library. Builds happen in a staging directory that is renamed into place, under a file lock so that
concurrent processes build each entry once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

from filelock import FileLock, Timeout

CACHE_ENV = "CUTLASS_EXT_CACHE"
MANIFEST = "manifest.json"
LIBRARY = "lib.so"


def cache_root() -> Path:
    # Absolute: builds run ninja in a staging directory, where a relative path would point elsewhere.
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "cutlass_ext").expanduser().absolute()
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not os.access(root, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable")
    except OSError as error:
        raise RuntimeError(
            f"cutlass_ext: the kernel cache {root} cannot be used ({error.strerror or error}); point {CACHE_ENV} at "
            "a writable directory"
        ) from None
    return root


def fingerprint(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


LOCK_TIMEOUT_ENV = "CUTLASS_EXT_BUILD_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 1800.0  # seconds: longer than any one library's build, shorter than forever


def _lock_timeout() -> float:
    text = os.environ.get(LOCK_TIMEOUT_ENV)
    try:
        value = DEFAULT_LOCK_TIMEOUT if text is None else float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:  # a negative timeout is filelock's "wait forever"
        raise ValueError(f"{LOCK_TIMEOUT_ENV}={text!r} must be a finite number of seconds >= 0")
    return value


@contextlib.contextmanager
def entry_locks(keys: list[str], what: str, timeout: float | None = None):
    """Hold the build lock of each cache entry in `keys` (one lock per entry: processes building different
    variants do not wait for each other). A lock still held after `timeout` seconds raises an error naming its
    holder (process, host, what it builds, since when). Locks die with their process: a killed build frees them."""
    timeout = _lock_timeout() if timeout is None else timeout
    folder = cache_root() / "locks"
    folder.mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        for key in sorted(set(keys)):  # one order for every process: no deadlock between two builds
            path = folder / f"{key[:32]}.lock"
            holder = path.with_suffix(".holder")
            try:
                stack.enter_context(FileLock(str(path), timeout=timeout))
            except Timeout:
                try:
                    who = holder.read_text().strip()
                except OSError:
                    who = "an unknown process"
                raise TimeoutError(
                    f"cutlass_ext: waited {timeout:.0f} s for the build lock {path}, held by {who}; if that process "
                    f"is gone, delete the file (or raise {LOCK_TIMEOUT_ENV})"
                ) from None
            holder.write_text(f"pid {os.getpid()} on {socket.gethostname()}, building {what}, since {time.ctime()}\n")
            stack.callback(holder.unlink, missing_ok=True)
        yield


def read_manifest(entry: Path, key: str) -> dict | None:
    """The manifest of a complete, undamaged entry with this key; None for anything else."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
        library = entry / manifest["library"]
        if manifest["key"] != key or file_sha256(library) != manifest["sha256"]:
            return None
        return manifest
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _staging_root() -> Path:
    staging = cache_root() / "staging"
    staging.mkdir(exist_ok=True)
    return staging


def _owner() -> tuple[str, str, str]:
    """(host, PID namespace, pid) of this process: a PID means a process only on its host and in its namespace
    (containers sharing a cache volume and a host name have namespaces of their own)."""
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = "0"
    return socket.gethostname(), namespace, str(os.getpid())


def staging_dir(prefix: str) -> Path:
    """A fresh staging directory named after its process (`<prefix>+<host>+<pid namespace>+<pid>+…`; `+` is in no
    host name), so that one left behind by a killed build can be told from one in use (`sweep_stale_staging`)."""
    return Path(tempfile.mkdtemp(prefix="+".join((prefix, *_owner(), "")), dir=_staging_root()))


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def sweep_stale_staging() -> list[Path]:
    """Delete the staging directories of this host's processes that are gone (killed builds), and return them.
    Call it holding a build lock: a directory of a live process, or of another host's, is never touched."""
    host, namespace, _ = _owner()
    removed = []
    for path in _staging_root().iterdir():
        parts = path.name.split("+")  # prefix, host, PID namespace, pid, random suffix
        if len(parts) != 5 or parts[1] != host or parts[2] != namespace or not parts[3].isdigit():
            continue
        if not _process_alive(int(parts[3])):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def commit(staged: Path, entry: Path, key: str, metadata: dict, library: str = LIBRARY) -> dict:
    """Seal `staged` with its manifest and move it to `entry`, replacing a damaged entry if one is there."""
    manifest = {"key": key, "library": library, "sha256": file_sha256(staged / library), **metadata}
    (staged / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    elif entry.exists() or entry.is_symlink():
        entry.unlink()  # a file where the entry belongs: damaged too
    entry.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, entry)
    return manifest
