"""What every task recipe shares: a task given no dev file never scores on its own training examples."""

import pytest

from bertology.config import TaskConfig
from bertology.errors import UserError
from bertology.tasks.readers import generic_task
from bertology.tasks.splits import DEV_FRACTION, hold_out_dev, read_split


def write_csv(path, rows: int):
    path.write_text("text,label\n" + "".join(f"example number {i},{i % 2}\n" for i in range(rows)), encoding="utf-8")
    return path


@pytest.mark.parametrize("given", ["data", "train_file"])
def test_one_file_is_split_into_train_and_a_held_out_dev_set(tmp_path, capsys, given):
    file = write_csv(tmp_path / "train.csv", 50)
    cfg = TaskConfig(task="classification", **{given: str(file)})
    spec = generic_task("classification", ["0", "1"], "text", None, "label", name="classification")
    everything = read_split(cfg, spec, "train")
    train, dev = hold_out_dev(cfg, spec, everything, seed=3)
    assert len(dev["dev"]) == round(DEV_FRACTION * 50) and len(train) + len(dev["dev"]) == 50
    assert not {e.text_a for e in train} & {e.text_a for e in dev["dev"]}  # never scored on what it trained on
    assert "5 of its 50 examples (10%, seed 3) are held out as the dev set" in capsys.readouterr().err
    again, dev_again = hold_out_dev(cfg, spec, everything, seed=3)
    assert [e.text_a for e in dev_again["dev"]] == [e.text_a for e in dev["dev"]]  # seeded: the same split


def test_a_separate_dev_file_is_used_as_it_is(tmp_path):
    cfg = TaskConfig(task="classification", train_file=str(write_csv(tmp_path / "train.csv", 20)),
                     dev_file=str(write_csv(tmp_path / "dev.csv", 6)))
    spec = generic_task("classification", ["0", "1"], "text", None, "label", name="classification")
    train, dev = hold_out_dev(cfg, spec, read_split(cfg, spec, "train"), seed=0)
    assert len(train) == 20 and dev is None


def test_a_file_too_small_to_split_is_refused(tmp_path):
    cfg = TaskConfig(task="classification", data=str(write_csv(tmp_path / "one.csv", 1)))
    spec = generic_task("classification", ["0", "1"], "text", None, "label", name="classification")
    with pytest.raises(UserError, match="one.csv: 1 example\\(s\\), too few to hold out a dev set"):
        hold_out_dev(cfg, spec, read_split(cfg, spec, "train"), seed=0)


def test_the_seeds_summary_lists_the_seeds_not_a_median_seed():
    from bertology.tasks.readers import TASKS
    from bertology.recipes.task_training import summarize

    summary = summarize(TASKS["sst2"], [{"seed": 0, "accuracy": 0.5}, {"seed": 1, "accuracy": 0.7}])
    assert summary["accuracy"] == pytest.approx(0.6) and summary["seeds"] == 2
    assert not {"seed", "seed_min", "seed_max", "seed_std"} & set(summary)  # a seed is not a metric
    assert [run["seed"] for run in summary["runs"]] == [0, 1]
