"""Atomic writes: all or nothing, with ordinary permissions."""

import os

import pytest

from bertology.errors import UserError
from bertology.files import atomic_path, staging_directory, write_json_atomic


def test_atomic_write_replaces_whole_and_uses_the_umask(tmp_path):
    path = tmp_path / "out.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"a": 2})
    assert path.read_text() == '{\n  "a": 2\n}\n'
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_pipe_is_written_in_place_not_replaced_by_a_regular_file(tmp_path):
    import stat
    import threading

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    received = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_text()), daemon=True)
    reader.start()
    write_json_atomic(pipe, {"a": 1})
    reader.join(10)
    assert received == ['{\n  "a": 1\n}\n']
    assert stat.S_ISFIFO(pipe.stat().st_mode)  # still the user's pipe
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


def test_a_full_device_is_a_one_line_error_and_stays_a_device(tmp_path):
    """`generate --out /dev/full` once replaced the device with a regular file (as root, /dev is
    writable); here a node of the same device in tmp_path, so the real one is never at risk."""
    import stat

    full = tmp_path / "full"
    try:
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # Linux's /dev/full
    except (PermissionError, AttributeError):
        pytest.skip("making a device node needs root on Linux")
    with pytest.raises(UserError, match=r"full: cannot write \(No space left on device\)$"):
        with atomic_path(full) as tmp:
            tmp.write_text("x" * 10000)
    assert stat.S_ISCHR(full.stat().st_mode)


def test_a_folder_is_refused_and_a_link_is_followed(tmp_path):
    with pytest.raises(UserError, match="is a folder; give a file name"):
        write_json_atomic(tmp_path, {})
    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json_atomic(link, {"a": 1})
    assert link.is_symlink() and target.read_text() == '{\n  "a": 1\n}\n'


def test_an_unwritable_place_is_a_one_line_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="cannot write"):
        write_json_atomic(tmp_path / "file" / "sub" / "out.json", {})


def test_a_staging_folder_is_locked_while_in_use_and_a_killed_runs_is_reused(tmp_path):
    out = tmp_path / "out"
    stale = tmp_path / ".out.partial"  # what a killed run leaves
    stale.mkdir()
    (stale / "half.bin").write_bytes(b"x")
    with staging_directory(out) as work:
        assert work == stale and not any(work.iterdir())
        with pytest.raises(UserError, match=r"out is being written by another run \(its .out.partial is locked\)"):
            with staging_directory(out):
                pass
        (work / "done.txt").write_text("ok")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and (out / "done.txt").read_text() == "ok"
    with pytest.raises(UserError, match="out already exists and is not empty"):
        with staging_directory(out):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
