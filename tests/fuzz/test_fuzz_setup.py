"""The fuzz tier's own hygiene (not slow): Hypothesis writes nothing into the checkout."""

from pathlib import Path

from hypothesis.configuration import storage_directory

REPO = Path(__file__).resolve().parents[2]


def test_hypothesis_storage_is_outside_the_checkout():
    # Its constants cache is written even with database=None; a .hypothesis/ folder in the
    # repository root was the symptom.
    where = storage_directory("constants", intent_to_write=False).path.resolve()
    assert REPO != where and REPO not in where.parents, where
