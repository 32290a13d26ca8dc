"""Pictures of training runs, written as PNG files (matplotlib, headless)."""

from __future__ import annotations

import os
from pathlib import Path

from .files import atomic_path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: str | os.PathLike) -> Path:
    """Write the figure as a PNG, atomically, and free it."""
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path


def plot_training_curves(runs: dict[str, list[dict]], path: str | os.PathLike, x: str = "step",
                         accuracy_keys: tuple[str, ...] = ("mlm_accuracy",)) -> Path:
    """Training loss (left) and held-out accuracy (right) of one or more runs, side by side.

    Args:
        runs: label -> rows of metrics.jsonl (training rows have "loss"; eval rows have
            "split": "eval" and the accuracy keys).
        path: the PNG to write (atomically).
        x: the x-axis key: "step" or "elapsed" (seconds).
    """
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for label, rows in runs.items():
        train = [r for r in rows if r.get("split") != "eval" and "loss" in r]
        evals = [r for r in rows if r.get("split") == "eval"]
        left.plot([r[x] for r in train], [r["loss"] for r in train], label=label)
        for key in accuracy_keys:
            points = [(r[x], r[key]) for r in evals if key in r and x in r]
            if points:
                right.plot(*zip(*points), marker="o", label=f"{label} {key}" if len(accuracy_keys) > 1 else label)
    xlabel = "seconds of training" if x == "elapsed" else "optimizer step"
    left.set(xlabel=xlabel, ylabel="training loss", title="Training loss")
    right.set(xlabel=xlabel, ylabel="accuracy", title="Held-out accuracy")
    for axis in (left, right):
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend()
    return _save(plt, fig, path)


def plot_demo(runs: dict[str, list[dict]], results: dict, path: str | os.PathLike) -> Path:
    """The demo's picture: dev accuracy per epoch of each fine-tuning run (left) and the final
    accuracies beside the majority-class rate (right)."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for label, rows in runs.items():
        evals = [r for r in rows if r.get("split") == "eval"]
        left.plot(range(1, len(evals) + 1), [r["accuracy"] for r in evals], marker="o", label=label.replace("_", " "))
    left.axhline(results["majority_rate"], color="grey", linestyle=":", label="majority class")
    left.set(xlabel="epoch", ylabel="dev accuracy", title="Fine-tuning on the labelled docstrings")
    left.grid(alpha=0.3)
    left.legend()
    names = [*runs, "majority"]
    values = [results[name]["accuracy"] for name in runs] + [results["majority_rate"]]
    bars = right.bar([n.replace("_", " ") for n in names], values, color=["tab:blue", "tab:orange", "grey"][: len(names)])
    right.bar_label(bars, fmt="%.3f")
    right.set(ylabel="dev accuracy", ylim=(0, 1), title="Pre-trained vs from scratch (same model, same labels)")
    return _save(plt, fig, path)
