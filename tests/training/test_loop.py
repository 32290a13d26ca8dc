"""The shared training loop: schedules, budgets, parameter groups, checkpoints, metrics and TensorBoard."""

import json
import re
import shutil
import sys

import numpy as np
import pytest
import torch
from torch import nn

from bertology import UserError
from bertology.training.loop import (
    Prefetcher,
    StepOutput,
    TrainConfig,
    Trainer,
    check_no_earlier_run,
    lr_factor,
    metrics_from_counts,
    parameter_groups,
    parse_duration,
    run_summary,
)


class Regression(nn.Module):
    """A tiny module with the objective interface: y = w.x, squared error."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 1)
        self.norm = nn.LayerNorm(4)

    def forward(self, batch):
        error = self.linear(self.norm(batch["x"])).squeeze(-1) - batch["y"]
        return StepOutput(error.square().mean(), {"fit_correct": (error.abs() < 0.5).sum(),
                                                   "fit_total": torch.tensor(error.numel())})


def test_each_language_model_loss_gets_its_own_perplexity_name():
    counts = {f"{name}_loss_sum": 2.0 for name in ("mlm", "lm", "forward_lm", "permutation_lm")}
    counts.update({f"{name}_total": 1.0 for name in ("mlm", "lm", "forward_lm", "permutation_lm")})
    names = {name for name in metrics_from_counts(counts) if name.endswith("perplexity")}
    assert names == {"mlm_perplexity", "perplexity", "forward_perplexity", "permutation_perplexity"}


def batches(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(8, 4, generator=g)
    return [{"x": x, "y": x @ torch.tensor([1.0, -2.0, 0.5, 3.0]), "attention_mask": torch.ones(8, 1)}]


def test_linear_schedule_warms_up_then_decays_to_zero():
    assert lr_factor("linear", 0.0, 0.1) == 0.0
    assert lr_factor("linear", 0.05, 0.1) == pytest.approx(0.5)
    assert lr_factor("linear", 0.1, 0.1) == pytest.approx(1.0)
    assert lr_factor("linear", 0.55, 0.1) == pytest.approx(0.5)
    assert lr_factor("linear", 1.0, 0.1) == pytest.approx(0.0)
    assert lr_factor("constant", 0.9, 0.1) == 1.0
    # ULMFiT's slanted triangle never goes below 1/32 of the peak.
    assert lr_factor("slanted_triangular", 0.0, 0.1) == pytest.approx(1 / 32)
    assert lr_factor("slanted_triangular", 1.0, 0.1) == pytest.approx(1 / 32)


def test_durations():
    assert parse_duration("90s") == 90 and parse_duration("20m") == 1200 and parse_duration("1.5h") == 5400
    assert parse_duration("45") == 45
    with pytest.raises(UserError, match="duration"):
        parse_duration("soon")


def test_no_weight_decay_on_biases_and_layer_norms():
    decay, no_decay = parameter_groups(Regression(), 0.01, lr=1e-3)
    assert [p.shape for p in decay["params"]] == [torch.Size([1, 4])]
    assert len(no_decay["params"]) == 3 and no_decay["weight_decay"] == 0.0


def test_discriminative_learning_rates_group_parameters_by_scale():
    groups = parameter_groups(Regression(), 0.01, lr=1e-3, lr_scale=lambda name: 0.5 if "weight" in name else 1.0)
    by_lr = {(g["lr"], g["weight_decay"]): sum(p.numel() for p in g["params"]) for g in groups}
    assert groups[0]["lr"] == 1e-3  # the largest rate first: it is the one logged
    assert by_lr[(5e-4, 0.01)] == 4 and (1e-3, 0.0) in by_lr


def test_step_budget_logs_and_keeps_the_last_checkpoints(tmp_path):
    torch.manual_seed(0)
    config = TrainConfig(lr=0.05, max_steps=30, log_every=5, save_every=10, keep_last=2, progress=False,
                         precision="fp32")
    trainer = Trainer(Regression(), config, tmp_path, batches)
    assert trainer.fit() == "completed"
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [5, 10, 15, 20, 25, 30]
    assert rows[-1]["loss"] < rows[0]["loss"] / 2 and rows[-1]["fit_accuracy"] > rows[0]["fit_accuracy"]
    assert rows[-1]["lr"] < rows[1]["lr"]  # decaying
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-00000020", "step-00000030"]


def test_a_run_says_up_front_how_fast_it_trains_and_how_long_it_takes(tmp_path, monkeypatch, capsys):
    """After its first timed steps (not the first, whose allocations are slow), every training
    command's loop prints its speed and the whole run's time once, and tells the recipe's hook."""
    import bertology.training.loop

    monkeypatch.setattr(bertology.training.loop, "ESTIMATE_AFTER_SECONDS", 0.0)
    speeds = []
    config = TrainConfig(max_steps=30, save_every=15, progress=False, precision="fp32")
    Trainer(Regression(), config, tmp_path / "run", batches, on_speed=speeds.append).fit()
    err = capsys.readouterr().err
    assert err.count("training at ") == 1 and len(speeds) == 1 and speeds[0] > 0
    assert re.search(r"training at [\d.]+ steps/s: 30 steps take about \d+ s \(evaluations aside\)", err), err
    (tmp_path / "run" / "checkpoints" / "step-00000030").rename(tmp_path / "run" / "kept")  # as if stopped at 15
    config = TrainConfig(max_steps=30, progress=False, precision="fp32", resume=True, max_time=3600)
    Trainer(Regression(), config, tmp_path / "run", batches).fit()
    err = capsys.readouterr().err
    assert "steps/s: 15 steps take about" in err and "(resumed at step 15; evaluations aside)" in err, err


@pytest.mark.slow
def test_time_budget_stops_the_run(tmp_path):
    config = TrainConfig(max_time=0.5, log_every=1000, save_every=0, progress=False, precision="fp32")
    trainer = Trainer(Regression(), config, tmp_path, batches)
    trainer.fit()
    assert 0.5 <= trainer.elapsed < 1.5 and trainer.step > 1


class Matrix(nn.Module):
    """A 2-D weight (Adafactor factors its second moments only for matrices): y = W x summed."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)))

    def forward(self, batch):
        error = (batch["x"] @ self.weight.T).sum(-1) - batch["y"]
        return StepOutput(error.square().mean(), {})


def test_adafactor_learns_with_factored_state_and_resumes_exactly(tmp_path):
    config = TrainConfig(optimizer="adafactor", lr=0.05, max_steps=40, log_every=10, save_every=20, progress=False,
                         precision="fp32", schedule="constant", warmup=0)
    whole = Trainer(Matrix(), config, tmp_path / "whole", batches)
    whole.fit()
    assert isinstance(whole.optimizer, torch.optim.Adafactor)
    state = whole.optimizer.state[whole.module.weight]
    assert state["row_var"].numel() == 3 and state["col_var"].numel() == 4  # factored: no (3, 4) statistic
    rows = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["loss"] < rows[0]["loss"] / 4
    Trainer(Matrix(), TrainConfig(**{**config.__dict__, "max_steps": 20}), tmp_path / "cut", batches).fit()
    resumed = Trainer(Matrix(), TrainConfig(**{**config.__dict__, "resume": True}), tmp_path / "cut", batches)
    resumed.fit()
    torch.testing.assert_close(resumed.module.weight, whole.module.weight, rtol=0, atol=0)


def test_a_budget_is_required_and_settings_are_checked(tmp_path):
    with pytest.raises(UserError, match="budget"):
        Trainer(Regression(), TrainConfig(), tmp_path, batches)
    with pytest.raises(UserError, match="schedule"):
        Trainer(Regression(), TrainConfig(max_steps=1, schedule="cosine"), tmp_path, batches)
    with pytest.raises(UserError, match="optimizer"):
        Trainer(Regression(), TrainConfig(max_steps=1, optimizer="sgd"), tmp_path, batches)


def test_damaged_checkpoint_is_a_clear_error_on_resume(tmp_path):
    config = TrainConfig(max_steps=4, save_every=2, progress=False, precision="fp32")
    Trainer(Regression(), config, tmp_path, batches).fit()
    (tmp_path / "checkpoints" / "step-00000004" / "optimizer.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="step-00000004: cannot resume"):
        Trainer(Regression(), TrainConfig(max_steps=8, progress=False, resume=True), tmp_path, batches).fit()


def test_a_finished_run_is_not_overwritten(tmp_path):
    config = TrainConfig(max_steps=2, progress=False, precision="fp32")
    Trainer(Regression(), config, tmp_path, batches).fit()
    with pytest.raises(UserError, match="already holds a training run"):
        Trainer(Regression(), config, tmp_path, batches).fit()


@pytest.mark.slow
def test_compile_option_wraps_the_module(tmp_path):
    trainer = Trainer(Regression(), TrainConfig(max_steps=1, compile=True, progress=False), tmp_path, batches)
    assert isinstance(trainer.wrapped, torch._dynamo.eval_frame.OptimizedModule)


def test_tensorboard_scalars_equal_the_metrics_log(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    torch.manual_seed(0)
    config = TrainConfig(lr=0.05, max_steps=6, log_every=2, eval_every=3, save_every=0, progress=False,
                         precision="fp32", tensorboard=True)
    Trainer(Regression(), config, tmp_path, batches, evaluate=lambda module: {"probe": 0.25 + module.linear.bias.item()}).fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    logged = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}
    expected = {}
    for row in rows:
        for key, value in row.items():
            if key not in ("step", "split"):
                expected.setdefault(f"{row.get('split', 'train')}/{key}", {})[row["step"]] = value
    assert set(logged) == set(expected) and {"train/loss", "train/lr", "eval/probe"} <= set(logged)
    assert sorted(logged["eval/probe"]) == [3, 6]
    for tag, by_step in expected.items():
        assert logged[tag] == pytest.approx(by_step, rel=1e-6), tag  # event files hold float32


def test_tensorboard_without_the_package_is_a_one_line_error(tmp_path, monkeypatch):
    for module in ("tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, module, None)  # makes importing it fail
    with pytest.raises(UserError, match=r"pip install 'bertology\[tensorboard\]'"):
        Trainer(Regression(), TrainConfig(max_steps=1, tensorboard=True), tmp_path, batches)
    assert not (tmp_path / "metrics.jsonl").exists()


def test_run_summary_weighs_each_rows_rate_by_its_seconds():
    rows = [{"step": 10, "loss": 2.0, "tokens_per_second": 100.0, "elapsed": 2.0},
            {"step": 10, "split": "eval", "elapsed": 2.0, "accuracy": 0.4},
            {"step": 20, "loss": 1.0, "tokens_per_second": 50.0, "elapsed": 6.0},
            {"step": 20, "split": "eval", "elapsed": 6.0, "accuracy": 0.6, "loss": 0.9}]
    summary = run_summary(rows)
    assert summary["steps"] == 20 and summary["seconds"] == 6.0
    assert summary["tokens"] == 100 * 2 + 50 * 4 and summary["tokens_per_second"] == pytest.approx(400 / 6)
    assert summary["eval"] == {"accuracy": 0.6, "loss": 0.9}


def test_a_failed_final_save_keeps_the_trained_weights_loadable(tmp_path, capsys):
    """The user-facing model cannot be written at the end: the checkpoint holding its weights is
    complete, the error says where, and --resume writes the model from it."""
    def broken_save(module):
        raise OSError("disk full")

    torch.manual_seed(0)
    config = TrainConfig(lr=0.05, max_steps=4, save_every=0, progress=False, precision="fp32")
    trainer = Trainer(Regression(), config, tmp_path, batches, save_model=broken_save)
    with pytest.raises(OSError, match="disk full"):
        trainer.fit()
    assert "weights (step 4) are safe in" in capsys.readouterr().err
    saved = {}
    resumed = Trainer(Regression(), TrainConfig(**{**config.__dict__, "resume": True}), tmp_path, batches,
                      save_model=lambda module: saved.update(module.state_dict()))
    assert resumed.fit() == "completed" and resumed.step == 4
    assert saved.keys() == trainer.module.state_dict().keys()
    assert all(torch.equal(saved[k], v) for k, v in trainer.module.state_dict().items())


def test_a_failed_checkpoint_write_leaves_the_last_one_loadable(tmp_path, capsys, monkeypatch):
    import bertology.training.loop as loop

    written = loop.save_module_state

    def fails_at_step_4(module, path):
        if "step-00000004" in str(path):
            raise OSError("disk full")
        return written(module, path)

    monkeypatch.setattr(loop, "save_module_state", fails_at_step_4)
    config = TrainConfig(lr=0.05, max_steps=4, save_every=2, progress=False, precision="fp32")
    trainer = Trainer(Regression(), config, tmp_path, batches)
    with pytest.raises(OSError, match="disk full"):
        trainer.fit()
    assert "the last complete one is" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-00000002"]  # no temp folder left
    monkeypatch.setattr(loop, "save_module_state", written)
    resumed = Trainer(Regression(), TrainConfig(**{**config.__dict__, "resume": True}), tmp_path, batches)
    assert resumed.resume() and resumed.step == 2


def test_a_fresh_run_refuses_a_folder_holding_the_users_files(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"the user's export")
    with pytest.raises(UserError, match=r"is not empty \(model.safetensors\): a training run writes only into a new"):
        check_no_earlier_run(tmp_path)
    assert (tmp_path / "model.safetensors").read_bytes() == b"the user's export"


def test_another_ranks_write_probe_is_not_an_earlier_run(tmp_path):
    """Under torchrun every rank checks the folder; one rank's write probe, there for a moment, is not
    something of the user's (a two-process test once failed on it)."""
    (tmp_path / ".write-test-4242").write_bytes(b"ok")
    check_no_earlier_run(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"is not empty \(notes.txt\)"):
        check_no_earlier_run(tmp_path)


def interrupted_run(out, **overrides):
    """A 4-step run whose checkpoint at step 2 is the last: what a resume starts from."""
    config = TrainConfig(max_steps=4, save_every=2, keep_last=2, progress=False, precision="fp32", **overrides)
    Trainer(Regression(), config, out, batches).fit()
    shutil.rmtree(out / "checkpoints" / "step-00000004")
    return out / "checkpoints" / "step-00000002"


@pytest.mark.parametrize("damage, message", [
    ({"step": -5}, r"step -5 is not the step of this checkpoint \(step-00000002, of a run of 4 steps\)"),
    ({"step": 10**12}, "step 1000000000000 is not the step of this checkpoint"),
    ({"step": 3}, "step 3 is not the step of this checkpoint"),
    ({"elapsed": float("nan")}, "elapsed time nan is not a number of seconds"),
    ({"elapsed": -1.0}, "elapsed time -1.0 is not a number of seconds"),
])
def test_a_checkpoint_with_an_impossible_step_or_time_is_refused(tmp_path, damage, message):
    checkpoint = interrupted_run(tmp_path)
    state = json.loads((checkpoint / "state.json").read_text())
    (checkpoint / "state.json").write_text(json.dumps({**state, **damage}))
    config = TrainConfig(max_steps=4, save_every=2, keep_last=2, progress=False, precision="fp32", resume=True)
    with pytest.raises(UserError, match=message) as error:
        Trainer(Regression(), config, tmp_path, batches).fit()
    assert "\n" not in str(error.value)


def test_a_resume_with_other_settings_is_refused_listing_them(tmp_path):
    interrupted_run(tmp_path, lr=1e-3)
    config = TrainConfig(max_steps=6, save_every=3, keep_last=2, progress=False, precision="fp32", resume=True,
                         lr=2e-3, seed=3)
    with pytest.raises(UserError, match=r"--resume with other settings than the run was started with "
                                        r"\(--lr 0.001 -> 0.002; --seed 0 -> 3\)"):
        Trainer(Regression(), config, tmp_path, batches).fit()


class Wider(Regression):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)


def test_a_checkpoint_of_another_model_is_a_one_line_error(tmp_path):
    interrupted_run(tmp_path)
    config = TrainConfig(max_steps=4, save_every=2, keep_last=2, progress=False, precision="fp32", resume=True)
    with pytest.raises(UserError, match="cannot resume from this checkpoint: it does not fit this model") as error:
        Trainer(Wider(), config, tmp_path, batches).fit()
    assert "\n" not in str(error.value) and "weights_only" not in str(error.value)


def test_a_diverging_run_stops_at_that_step_keeping_its_last_good_checkpoint(tmp_path):
    config = TrainConfig(lr=1e30, warmup=0, schedule="constant", max_steps=20, save_every=1, log_every=1, keep_last=2,
                         progress=False, precision="fp32", max_grad_norm=0)
    trainer = Trainer(Regression(), config, tmp_path, batches)
    with pytest.raises(UserError, match=r"^the loss became (inf|nan) at step (\d+) \(learning rate 1e\+30\): the "
                                        r"learning rate is most likely too high") as error:
        trainer.fit()
    message = str(error.value)
    assert "\n" not in message and f"its last good checkpoint is {trainer.checkpoint_dir(trainer.step)}" in message
    kept = torch.load(trainer.checkpoint_dir(trainer.step) / "optimizer.pt", weights_only=True)  # readable
    assert kept["state"] and all(torch.isfinite(p).all() for p in trainer.module.parameters())
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(np.isfinite(row["loss"]) for row in rows)


def test_a_nan_evaluation_is_refused_and_nothing_reports_it(tmp_path):
    saved = []
    trainer = Trainer(Regression(), TrainConfig(max_steps=2, progress=False, precision="fp32"), tmp_path, batches,
                      evaluate=lambda module: {"loss": float("nan"), "fit_accuracy": 0.5},
                      save_model=lambda module: saved.append(True))
    with pytest.raises(UserError, match="^the held-out loss became nan at step 2: the model's weights have diverged"):
        trainer.fit()
    assert not saved and "nan" not in (tmp_path / "metrics.jsonl").read_text().lower()


def test_run_problems_flag_a_run_whose_last_metrics_are_not_finite(tmp_path):
    from bertology.training.loop import run_problems

    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 10, "loss": 2.5}\n{"step": 10, "split": "eval", "loss": 2.4}\n')
    assert run_problems(tmp_path) == []
    log.write_text(log.read_text() + '{"step": 20, "loss": 2.1}\n{"step": 20, "split": "eval", "loss": NaN, '
                                     '"perplexity": NaN}\n')
    assert run_problems(tmp_path) == [f"{log}: the last evaluation (step 20) has loss nan: the run diverged"]
    log.write_text("{not json\n")
    assert run_problems(tmp_path)[0].startswith(f"{log}: cannot read the run's metrics")


# --- Cramming's schedule and batch ramp ----------------------------------------------------------


class Windows:
    """Micro-batches by their number in the run (`window`), recording what each step read."""

    def __init__(self):
        self.read = []

    def window(self, first, count):
        self.read.append((first, count))
        return [batches(first + k)[0] for k in range(count)]

    def __call__(self, step):
        raise AssertionError("a ramped run reads windows")


def test_one_cycle_triangle_peaks_midway_and_the_last_steps_lr_leads_to_zero(tmp_path):
    # --schedule linear --warmup 0.5: Cramming's one-cycle triangle over the step budget
    config = TrainConfig(lr=0.01, warmup=0.5, max_steps=20, log_every=1, save_every=0, progress=False,
                         precision="fp32")
    trainer = Trainer(Regression(), config, tmp_path, batches)
    trainer.fit()
    lrs = [row["lr"] for row in trainer.log.rows() if "split" not in row]
    assert lrs[0] == 0.0 and max(lrs) == pytest.approx(0.01) and lrs.index(max(lrs)) == 10
    assert lrs[-1] == pytest.approx(0.01 / 10)  # the last step's rate: one step of the decay from 0
    assert trainer.set_lr() == 0.0  # at the budget's end the rate is 0


def test_time_budget_schedule_ends_at_zero_with_the_time(tmp_path, monkeypatch):
    # A fake clock: every step takes 1 s, so a 10 s budget is 10 steps and the rate is exactly that of its time
    clock = iter(range(0, 10_000, 1))
    monkeypatch.setattr("bertology.training.loop.time.perf_counter", lambda: float(next(clock)))
    config = TrainConfig(lr=0.01, warmup=0.5, max_time="10s", log_every=1, save_every=0, progress=False,
                         precision="fp32")
    trainer = Trainer(Regression(), config, tmp_path, batches)
    trainer.fit()
    lrs = [row["lr"] for row in trainer.log.rows() if "split" not in row]
    assert trainer.step == 10 and trainer.elapsed == 10.0
    assert lrs == pytest.approx([0.01 * min(t / 5, (10 - t) / 5) for t in range(10)])
    assert trainer.set_lr() == 0.0


def test_batch_ramp_grows_the_effective_batch_and_reads_each_micro_batch_once(tmp_path):
    source = Windows()
    config = TrainConfig(lr=0.01, max_steps=12, grad_accum=4, batch_ramp=0.5, log_every=1, save_every=0,
                         progress=False, precision="fp32")
    trainer = Trainer(Regression(), config, tmp_path, source)
    trainer.fit()
    counts = [count for _, count in source.read]
    assert counts == [1, 2, 2, 3, 3, 4, 4, 4, 4, 4, 4, 4]  # 1 + 3 * min(step / 6, 1), halves up
    assert [first for first, _ in source.read] == [sum(counts[:i]) for i in range(12)]  # contiguous, none twice
    assert [row["micro_batches_per_step"] for row in trainer.log.rows() if "split" not in row] == counts


def test_batch_ramp_resumes_where_the_micro_batches_stopped(tmp_path):
    def run(folder, max_steps, resume=False):
        torch.manual_seed(0)
        source = Windows()
        config = TrainConfig(lr=0.01, max_steps=max_steps, grad_accum=3, batch_ramp=1.0, log_every=1, save_every=4,
                             keep_last=5, progress=False, precision="fp32", resume=resume)
        trainer = Trainer(Regression(), config, folder, source)
        trainer.fit()
        return source.read, [row["loss"] for row in trainer.log.rows() if "split" not in row]

    whole, whole_losses = run(tmp_path / "whole", 10)
    run(tmp_path / "split", 10)
    # interrupted at step 4: drop the later checkpoints, then resume
    for folder in (tmp_path / "split" / "checkpoints").iterdir():
        if folder.name != "step-00000004":
            shutil.rmtree(folder)
    rest, losses = run(tmp_path / "split", 10, resume=True)
    assert rest == whole[4:]
    assert losses == pytest.approx(whole_losses)


def test_batch_ramp_settings_are_checked(tmp_path):
    with pytest.raises(UserError, match="--grad-accum 2"):
        Trainer(Regression(), TrainConfig(max_steps=5, batch_ramp=0.5, progress=False), tmp_path, Windows())
    with pytest.raises(UserError, match="at most 1"):
        Trainer(Regression(), TrainConfig(max_steps=5, grad_accum=2, batch_ramp=2.0, progress=False), tmp_path,
                Windows())
    with pytest.raises(UserError, match="--batch-ramp"):
        Trainer(Regression(), TrainConfig(max_steps=5, grad_accum=2, batch_ramp=0.5, progress=False), tmp_path,
                batches)


class Recorded:
    """`batches`, recording which thread asked for which step."""

    prefetchable = True

    def __init__(self, fail_at: int | None = None):
        self.calls, self.fail_at = [], fail_at

    def __call__(self, step):
        import threading

        self.calls.append((step, threading.current_thread().name))
        if step == self.fail_at:
            raise UserError(f"step {step}: the corpus ran dry")
        return batches(step)


def test_the_prefetcher_gives_each_step_its_batches_prepared_ahead_on_a_thread():
    source = Recorded()
    with Prefetcher(source, pin_memory=False, depth=2) as prefetcher:
        for step in range(5):
            assert torch.equal(prefetcher(step)[0]["x"], batches(step)[0]["x"])
        assert torch.equal(prefetcher(2)[0]["x"], batches(2)[0]["x"])  # out of order (a resume): starts again there
    assert {name for _, name in source.calls} == {"bertology-prefetch"}
    steps = [step for step, _ in source.calls]
    assert steps[:5] == [0, 1, 2, 3, 4] and 2 in steps[5:]
    assert max(steps[:steps.index(2, 5)]) <= 4 + 3  # at most depth + 1 steps ahead of the last one taken


def test_an_error_while_preparing_is_raised_for_its_step_in_the_training_thread():
    with Prefetcher(Recorded(fail_at=3), pin_memory=False) as prefetcher:
        for step in range(3):
            prefetcher(step)
        with pytest.raises(UserError, match="step 3: the corpus ran dry"):
            prefetcher(3)


def test_a_prefetched_run_trains_exactly_as_one_that_is_not(tmp_path):
    """On a GPU the loop prefetches prefetchable batches; the same losses either way (tested on the CPU
    by giving the trainer the prefetcher it would build there)."""
    losses = []
    for prefetch in (False, True):
        torch.manual_seed(0)
        config = TrainConfig(lr=0.05, max_steps=12, log_every=1, progress=False, precision="fp32")
        out = tmp_path / str(prefetch)
        trainer = Trainer(Regression(), config, out, Recorded())
        assert trainer.prefetcher is None  # the CPU: no thread
        if prefetch:
            trainer.prefetcher = Prefetcher(trainer.micro_batches, pin_memory=False)
        assert trainer.fit() == "completed"
        assert prefetch == any(name == "bertology-prefetch" for _, name in trainer.micro_batches.calls)
        losses.append([json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()
                       if "split" not in json.loads(line)])
    assert losses[0] == losses[1] and len(losses[0]) == 12
