"""Pictures of training runs and of what an encoder does inside, written as PNG files (matplotlib, headless)."""

from __future__ import annotations

import math
import os
import textwrap
from pathlib import Path

import numpy as np

from .files import atomic_path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: str | os.PathLike, layout: bool = True) -> Path:
    """Write the figure as a PNG, atomically, and free it; `layout=False` keeps a layout already made."""
    if layout:
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


def plot_demo(curves: list[dict[str, list[dict]]], results: dict, path: str | os.PathLike) -> Path:
    """The demo's picture: dev accuracy per epoch of every fine-tuning run, one line per seed
    (left), and each model's median accuracy over the seeds with its range, beside the
    baselines (right).

    Args:
        curves: one dict per seed: model name ("pretrained", "from_scratch", and with a
            reference model "reference_pretrained", "reference_from_scratch") -> metrics rows.
        results: the demo's results.json content ("summary", "baselines", "reference_model").
    """
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6))
    reference = results.get("reference_model")
    models = {"pretrained": ("pre-trained here", "tab:blue"), "from_scratch": ("random weights", "tab:orange"),
              "reference_pretrained": (str(reference), "tab:purple"),
              "reference_from_scratch": ("its random weights", "tab:brown")}
    for index, seed_curves in enumerate(curves):
        for name, rows in seed_curves.items():
            evals = [r for r in rows if r.get("split") == "eval"]
            left.plot(range(1, len(evals) + 1), [r["accuracy"] for r in evals], color=models[name][1], alpha=0.8,
                      label=models[name][0] if index == 0 else None)
    baselines = results["baselines"]
    left.axhline(baselines["tfidf_chars"]["accuracy"], color="tab:olive", linestyle="--", label="TF-IDF chars")
    left.axhline(baselines["majority"]["accuracy"], color="grey", linestyle=":", label="majority class")
    left.set(xlabel="epoch", ylabel="dev accuracy", title=f"Fine-tuning, {len(curves)} seed(s)")
    left.grid(alpha=0.3)
    left.legend(fontsize="small")
    summary = results["summary"]
    bars = [(textwrap.fill(models[name][0], 11), summary[name]["median"], summary[name]["min"], summary[name]["max"], models[name][1])
            for name in models if name in summary]
    bars += [(label, baselines[name]["accuracy"], None, None, colour) for name, label, colour in
             (("tfidf_words", "TF-IDF\nwords", "tab:green"), ("tfidf_chars", "TF-IDF\nchars", "tab:olive"),
              ("majority", "majority", "grey"))]
    values = [value for _, value, *_ in bars]
    errors = [[value - low if low is not None else 0.0 for _, value, low, _, _ in bars],
              [high - value if high is not None else 0.0 for _, value, _, high, _ in bars]]
    drawn = right.bar([label for label, *_ in bars], values, yerr=errors, capsize=4,
                      color=[colour for *_, colour in bars])
    right.bar_label(drawn, fmt="%.3f", label_type="center", color="white")
    right.tick_params(axis="x", labelsize="small")
    right.set(ylabel="dev accuracy (median, range over seeds)", ylim=(0, 1),
              title="Same labels: pre-trained vs random weights, and the baselines")
    return _save(plt, fig, path)


def grid_shape(count: int) -> tuple[int, int]:
    """Rows and columns of a near-square grid of `count` panels, no taller than wide."""
    columns = math.ceil(math.sqrt(count))
    return math.ceil(count / columns), columns


def plot_attention(tokens: list[str], weights, layers: list[int], heads: list[int], model_name: str,
                   path: str | os.PathLike) -> Path:
    """Attention heatmaps with the tokens on both axes: row = the attending token, column = the
    token attended to.

    Args:
        weights: (len(layers), len(heads), T, T) attention probabilities.
        layers, heads: the numbers of the layers and heads shown, for the labels.
    One map is drawn large; several are small multiples on one colour scale, tokens on the outer
    axes. With several layers and several heads the grid is layers x heads, otherwise it wraps.
    """
    plt = _pyplot()
    panels = [(layer, head, weights[i, j]) for i, layer in enumerate(layers) for j, head in enumerate(heads)]
    full_grid = len(layers) > 1 and len(heads) > 1
    rows, columns = (len(layers), len(heads)) if full_grid else grid_shape(len(panels))
    count = len(tokens)
    cell = min(max(0.16 * count, 1.6), 3.2) if len(panels) > 1 else min(max(0.3 * count, 4.0), 12.0)
    fontsize = min(9.0, 0.75 * 72 * cell / count)  # points: the tokens of one axis must fit its length
    width = columns * cell + 2.2  # room for the token labels on the left and the colour bar on the right
    fig, axes = plt.subplots(rows, columns, figsize=(width, rows * cell + 1.6), squeeze=False)
    vmax = float(max(p[2].max() for p in panels))
    for n, axis in enumerate(axes.flat):
        if n >= len(panels):
            axis.set_visible(False)
            continue
        layer, head, grid = panels[n]
        image = axis.imshow(grid, cmap="viridis", vmin=0.0, vmax=vmax)
        row, column = divmod(n, columns)
        left, bottom = column == 0, n + columns >= len(panels)  # the outer edges of the used panels
        axis.set_xticks(range(count), tokens if bottom else [], rotation=90, fontsize=fontsize)
        axis.set_yticks(range(count), tokens if left else [], fontsize=fontsize)
        axis.tick_params(length=0)
        if full_grid:
            if row == 0:
                axis.set_title(f"head {head}", fontsize=9)
            if left:
                axis.set_ylabel(f"layer {layer}", fontsize=9)
        elif len(panels) > 1:
            axis.set_title(f"head {head}" if len(layers) == 1 else f"layer {layer}", fontsize=9)
    what = (f"layer {layers[0]}, head {heads[0]}" if len(panels) == 1
            else f"layer {layers[0]}, all {len(heads)} heads" if len(layers) == 1
            else f"head {heads[0]} in each layer" if len(heads) == 1
            else f"{len(layers)} layers x {len(heads)} heads")
    fig.suptitle(f"Attention of {model_name}: {what}\n(row: the token attending; column: the token attended to)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1 - 1.0 / width, 1))  # the last inch is the colour bar's
    fig.colorbar(image, cax=fig.add_axes((1 - 0.85 / width, 0.2, 0.15 / width, 0.6)), label="attention weight")
    return _save(plt, fig, path, layout=False)


def plot_word_senses(word: str, senses: list[str], contextual_xy, contextual_shares, *, target_xy, context_xy,
                     static_shares, context_words: list[str], context_senses: list[set[str]], title: str,
                     contextual_note: str, path: str | os.PathLike,
                     static_source: str = "input embeddings") -> Path:
    """A word's contextual vectors (left) beside the static view (right), both as 2-D projections.

    Args:
        senses: the sense of each sentence.
        contextual_xy, contextual_shares: (N, 2) projected contextual vectors of the word, one per
            sentence, and the variance share of each axis (2,).
        target_xy: (2,) the word's static vector, the same in every sentence.
        context_xy, static_shares: (W, 2) the static vectors of the sentences' other words, and the
            variance shares of that projection.
        context_senses: the senses of the sentences each other word occurs in; a word of one sense
            only takes that sense's colour.
    """
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.8))
    order = list(dict.fromkeys(senses))
    colours = {sense: plt.get_cmap("tab10")(k % 10) for k, sense in enumerate(order)}
    markers = dict(zip(order, "os^DvP<>" * (len(order) // 8 + 1)))
    for sense in order:
        points = [xy for xy, s in zip(contextual_xy, senses) if s == sense]
        left.scatter(*zip(*points), s=70, color=colours[sense], marker=markers[sense], edgecolor="black",
                     linewidth=0.5, label=f"{sense} ({len(points)} sentences)")
    left.set(title=f"Contextual: {word!r} in each sentence\n{contextual_note}",
             xlabel=f"PC1 ({contextual_shares[0]:.0%} of variance)", ylabel=f"PC2 ({contextual_shares[1]:.0%})")
    left.legend(title="sense")
    single = [next(iter(s)) if len(s) == 1 else None for s in context_senses]
    span = np.ptp(np.vstack([context_xy, target_xy]), axis=0)  # (2,) to tell when two labels would collide
    placed = [np.asarray(target_xy)]
    shared = [xy for xy, s in zip(context_xy, single) if s is None]
    if shared:
        right.scatter(*zip(*shared), s=14, color="lightgrey", label="other words, several senses' sentences")
    for sense in order:
        mine = [(xy, w) for xy, w, s in zip(context_xy, context_words, single) if s == sense]
        if not mine:
            continue
        right.scatter(*zip(*[xy for xy, _ in mine]), s=18, color=colours[sense], alpha=0.8,
                      label=f"other words of {sense} sentences only")
        # Name a few of them, the longest (function words are short and shared by all senses),
        # skipping any that would print over a label already placed.
        named = 0
        for xy, name in sorted(mine, key=lambda item: -len(item[1])):
            if named == 5:
                break
            if all((np.abs(xy - other) > span * [0.12, 0.05]).any() for other in placed):
                right.annotate(name, xy, xytext=(3, 3), textcoords="offset points", fontsize=8, color=colours[sense])
                placed.append(xy)
                named += 1
    right.scatter(*target_xy, s=320, marker="*", color="black", zorder=3, label=f"{word!r} in all {len(senses)} sentences")
    right.annotate(word, target_xy, xytext=(9, -4), textcoords="offset points", fontsize=11, fontweight="bold")
    right.set(title=f"Static: {static_source} (no context)\n{word!r} is one and the same vector in every sentence",
              xlabel=f"PC1 ({static_shares[0]:.0%} of variance)", ylabel=f"PC2 ({static_shares[1]:.0%})")
    right.legend(fontsize=8)
    for axis in (left, right):
        axis.grid(alpha=0.3)
    fig.suptitle(title)
    return _save(plt, fig, path)


def plot_epoch_metrics(rows: list[dict], panels: dict[str, str], path: str | os.PathLike, title: str) -> Path:
    """One panel per metric against the epoch, side by side (the static-vectors training curves).

    Args:
        rows: one dict per epoch, with "epoch" and any of the `panels` keys (a row may lack some).
        panels: metric key -> its axis label; a key no row has is left out.
    """
    plt = _pyplot()
    shown = {key: label for key, label in panels.items() if any(row.get(key) is not None for row in rows)}
    fig, axes = plt.subplots(1, max(len(shown), 1), figsize=(5.5 * max(len(shown), 1), 4), squeeze=False)
    for axis, (key, label) in zip(axes[0], shown.items()):
        points = [(row["epoch"], row[key]) for row in rows if row.get(key) is not None]
        axis.plot(*zip(*points), marker="o")
        axis.set(xlabel="epoch", ylabel=label, title=label)
        axis.grid(alpha=0.3)
    fig.suptitle(title)
    return _save(plt, fig, path)


def _median_and_range(values: list[float]) -> tuple[float, float, float]:
    """(median, median - min, max - median): a point and its asymmetric error bar over seeds."""
    median = float(np.median(values))
    return median, median - min(values), max(values) - median


def plot_seed_lines(series: dict[str, dict[float, list[float]]], path: str | os.PathLike, *, xlabel: str,
                    ylabel: str, title: str, log_x: bool = False) -> Path:
    """One line per model: the median over seeds at each x, with min-max error bars (the claims' curves).

    Args:
        series: label -> {x: every seed's value at x}.
        log_x: a log-scaled x axis (label counts, compute).
    """
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(7, 4.5))
    for label, points in series.items():
        xs = sorted(points)
        stats = [_median_and_range(points[x]) for x in xs]
        axis.errorbar(xs, [s[0] for s in stats], yerr=[[s[1] for s in stats], [s[2] for s in stats]],
                      marker="o", capsize=3, label=label)
    if log_x:
        axis.set_xscale("log")
    axis.set(xlabel=xlabel, ylabel=ylabel, title=title)
    axis.grid(alpha=0.3)
    axis.legend()
    return _save(plt, fig, path)


def plot_seed_bars(groups: dict[str, dict[str, list[float]]], path: str | os.PathLike, *, ylabel: str,
                   title: str) -> Path:
    """Grouped bars: for each group (a task), one bar per model at its median over seeds, with
    min-max error bars and every seed's value as a dot.

    Args:
        groups: group label -> {model label: every seed's value}; a model may be missing from a group.
    """
    plt = _pyplot()
    models = list(dict.fromkeys(model for bars in groups.values() for model in bars))
    width = 0.8 / max(len(models), 1)
    fig, axis = plt.subplots(figsize=(max(6, 1.2 + 0.45 * len(models) * len(groups)), 4.5))
    for k, model in enumerate(models):
        xs, stats, dots = [], [], []
        for g, bars in enumerate(groups.values()):
            if model in bars:
                x = g - 0.4 + width * (k + 0.5)
                xs.append(x)
                stats.append(_median_and_range(bars[model]))
                dots += [(x, v) for v in bars[model]]
        axis.bar(xs, [s[0] for s in stats], width, yerr=[[s[1] for s in stats], [s[2] for s in stats]],
                 capsize=3, label=model)
        axis.scatter([x for x, _ in dots], [v for _, v in dots], s=8, color="black", zorder=3)
    axis.set_xticks(range(len(groups)), list(groups))
    axis.set(ylabel=ylabel, title=title)
    axis.grid(alpha=0.3, axis="y")
    axis.legend(fontsize="small")
    return _save(plt, fig, path)
