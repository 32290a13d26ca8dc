"""What the fuzz tier's files share (tests/fuzz/): derandomized Hypothesis settings, an alarm per
case, the one accepted failure (bertology's one-line UserError), and byte mutations of a valid input.

Hypothesis runs derandomized with no example database, so the same cases run every time and a
failure reproduces (its caches go to the temporary folder: tests/conftest.py).
"""

import contextlib
import signal
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from bertology.errors import UserError

SECONDS_PER_CASE = 20  # the alarm: far above any case's time, far below "hung"

# Pieces that broke (or could break) a reader: encodings, line ends, controls, invisible
# characters, quoting, JSON's limits, numbers that are not numbers.
NASTY = [b"\x00", b"\r", b"\r\n", b"\n\n", b"\t", b"\x1b", b"\x7f", b"\xff\xfe", b"\xfe\xff", b"\xef\xbb\xbf",
         "\u200b".encode(), "\u00a0".encode(), "\u2028".encode(), b"\xed\xa0\x80", b"\xc3", b"\xf0\x9f\x98",
         b'"', b"'", b",", b"\\", b"{", b"}", b"[", b"]", b":", b"9" * 5000, b"[" * 3000, b"{\"a\":" * 2000,
         b"NaN", b"Infinity", b"-1", b"1e309", b"null", b"true", b"-DOCSTART-", b" = Title = ", b"\xe2\x80\xae"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**40) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def fuzz_settings(cases: int):
    """Hypothesis settings of a fuzz test running `cases` cases, the same ones every time."""
    return settings(max_examples=cases, derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))


@contextlib.contextmanager
def time_limit(seconds: int = SECONDS_PER_CASE):
    """Fail the case (instead of hanging the suite) if it runs longer than `seconds`."""
    def hung(signum, frame):
        raise AssertionError(f"a case ran for more than {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def outcome(read):
    """`read()`'s result, or None when it stops with bertology's one-line error."""
    with time_limit():
        try:
            return read()
        except UserError as error:
            assert str(error).strip() and "\n" not in str(error).strip(), repr(str(error))
            return None


@st.composite
def mutated(draw, base: bytes) -> bytes:
    """`base` with a few insertions, deletions and overwrites of nasty or random bytes; now and
    then re-encoded as UTF-16 with a byte order mark, or cut short."""
    data = bytearray(base)
    for _ in range(draw(st.integers(0, 6))):
        position = draw(st.integers(0, len(data)))
        piece = draw(st.one_of(st.sampled_from(NASTY), st.binary(min_size=1, max_size=6)))
        action = draw(st.sampled_from(("insert", "delete", "overwrite")))
        if action == "insert":
            data[position:position] = piece
        elif action == "delete":
            del data[position:position + draw(st.integers(1, 40))]
        else:
            data[position:position + len(piece)] = piece
    ending = draw(st.integers(0, 19))
    if ending == 0:
        with contextlib.suppress(UnicodeDecodeError):
            data = bytearray(data.decode("utf-8").encode("utf-16"))
    elif ending == 1:
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


def write(folder: Path, name: str, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    return path
