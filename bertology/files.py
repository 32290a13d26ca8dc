"""Atomic file writes, so an interrupted run never leaves a half-written file.

Every output of bertology (checkpoints, configs, vocabularies, metrics) is first
written to a temporary file in the destination folder and then renamed over the
final name; `os.replace` is atomic on POSIX and Windows, so a reader sees either
the old file or the new one, never a truncated mix. `cache_root` is where reusable
outputs (tokenized corpora, cached features, a teacher's targets) are kept between runs.
`loads_json` is the one JSON parser every reader uses, so that malformed input of any kind
reaches the reader's one-line error.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import UserError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` on success.

    The temporary file is removed if the body raises, so nothing half-written is left. Only a
    regular file (or a new name) is replaced: a symbolic link is followed to the file it names,
    and a device or a pipe the user gives (`--out /dev/stdout`) is written in place, since a
    rename would put a regular file where the device was. A folder is refused, and a write that
    fails for want of space or permission is a one-line UserError naming the file.
    """
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a folder; give a file name")
    if path.exists() and not path.is_file():  # a device, a pipe, a socket: nothing to rename over
        with _write_errors(path):
            yield path
        return
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    with _write_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        with _write_errors(path):
            yield tmp_path
            if tmp_path.exists():  # mkstemp creates 0600 files; give the usual permissions instead
                os.chmod(tmp_path, _new_file_mode())
            os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


# Failures of a write that the user fixes, not bertology: a full disk or quota, a read-only or
# unwritable place, a path through a file.
WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR,
                errno.EEXIST, errno.EISDIR)


@contextlib.contextmanager
def _write_errors(path: Path) -> Iterator[None]:
    """Turn the OSErrors of WRITE_ERRORS raised in the body into one-line UserErrors naming `path`."""
    try:
        yield
    except OSError as err:
        if err.errno not in WRITE_ERRORS:
            raise
        raise UserError(f"{path}: cannot write ({err.strerror or err})") from None


@contextlib.contextmanager
def staging_directory(out: str | os.PathLike) -> Iterator[Path]:
    """Yield the hidden folder `.NAME.partial` beside `out` (NAME: its name), renamed to `out`
    when the body succeeds; `out` must be new or an empty folder.

    On an error (or Ctrl-C) the folder is removed, so no half-written directory is left. The
    folder is locked while the body runs (flock, which the system releases when a process dies,
    however it dies): a second run into the same `out` is refused at once instead of both writing
    it, and a folder left by a killed run (SIGKILL can't be caught) is found unlocked, emptied and
    reused by the next run, so they never pile up.
    """
    out = Path(out)
    work = out.parent / f".{out.name}.partial"
    out.parent.mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    handle, locked = os.open(work, os.O_RDONLY), False
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"{out} is being written by another run (its {work.name} is locked); wait for it to "
                            "finish, or choose another --out") from None
        if not work.exists() or os.stat(work).st_ino != os.fstat(handle).st_ino:
            # the run that held it renamed it to `out` meanwhile: that one won
            raise UserError(f"{out} was written by another run meanwhile; choose another --out")
        locked = True
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise UserError(f"{out} already exists and is not empty; choose another --out")
        for leftover in work.iterdir():  # a killed run's
            shutil.rmtree(leftover) if leftover.is_dir() and not leftover.is_symlink() else leftover.unlink()
        try:
            yield work
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        if out.exists():
            out.rmdir()
        os.replace(work, out)
    finally:
        if locked and work.is_dir() and not any(work.iterdir()):
            work.rmdir()  # refused before writing: no trace (only while holding it: another run may be in it)
        os.close(handle)


def _new_file_mode() -> int:
    """The mode `open()` would give a new file: 0o666 less the process's umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write `obj` as indented, key-sorted JSON to `path` atomically."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def cache_root() -> Path:
    """Where outputs reused across runs are kept: $BERTOLOGY_CACHE, or ~/.cache/bertology."""
    return Path(os.environ.get("BERTOLOGY_CACHE", Path.home() / ".cache" / "bertology"))


_LONG_INTEGER = re.compile(r"-?\d{4301,}")  # Python's int() refuses more than 4,300 digits (sys.int_info)


def loads_json(text: str | bytes) -> Any:
    """`json.loads`, except that every malformed input fails as a `json.JSONDecodeError`.

    Python's own limits raise other errors from inside the parser: an integer of more than
    4,300 digits (ValueError) and nesting deeper than the recursion limit (RecursionError).
    Each reader catches JSONDecodeError alone to name the file and line, so those are turned
    into one, at the position of the long number (or of the first bracket for the nesting).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        document = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        start = next((i for i, c in enumerate(document) if c in "[{"), 0)
        raise json.JSONDecodeError("nested too deeply", document, start) from None
    except ValueError as err:  # the integer-length limit
        document = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        match = _LONG_INTEGER.search(document)
        raise json.JSONDecodeError(f"a number too long to read ({str(err).split(';')[0]})", document,
                                   match.start() if match else 0) from None
