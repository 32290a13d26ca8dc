"""Evaluation metrics of the fine-tuning tasks, computed as each benchmark's official scorer does.

| metric keys | tasks | computed by |
|---|---|---|
| accuracy, f1, mcc | GLUE classification | scikit-learn |
| pearson, spearman | STS-B, regression | scipy.stats |
| precision, recall, f1 (entities), accuracy (tokens) | CoNLL-2003 | seqeval, conlleval-compatible |
| exact_match, f1 | SQuAD 1.1 and 2.0 | the logic of the official evaluate-v1.1.py / evaluate-v2.0.py |

Every value is a float fraction (SQuAD's scripts print percentages; here 0.9 is 90%). MCC and
the correlations lie in [-1, 1]. scikit-learn, scipy and seqeval each take about a second to
import, so they are imported inside the functions that need them: `bertology.tasks.metrics`
itself loads instantly and without PyTorch."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from .readers import SpanExample, TaskSpec

CLASSIFICATION_METRICS = ("accuracy", "f1", "mcc")


def classification_metrics(
    labels: Sequence[int], predictions: Sequence[int], metrics: Sequence[str] = CLASSIFICATION_METRICS
) -> dict[str, float]:
    """Accuracy, F1 and Matthews correlation (MCC) of predicted class ids.

    Args:
        labels: gold class ids.
        predictions: predicted class ids, one per label.
        metrics: the keys wanted, among "accuracy", "f1" (binary: of class id 1, as GLUE
            scores MRPC and QQP; 0 when class 1 is never predicted nor gold) and "mcc" (any
            number of classes; 0 when undefined).

    Returns:
        {key: value} for the keys asked.
    """
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    _check_lengths(labels, predictions)
    scorers = {
        "accuracy": lambda: accuracy_score(labels, predictions),
        "f1": lambda: f1_score(labels, predictions, pos_label=1, average="binary", zero_division=0.0),
        "mcc": lambda: matthews_corrcoef(labels, predictions),
    }
    unknown = set(metrics) - set(scorers)
    if unknown:
        raise ValueError(f"unknown classification metrics {sorted(unknown)}: use {', '.join(scorers)}")
    return {key: float(scorers[key]()) for key in metrics}


def regression_metrics(labels: Sequence[float], predictions: Sequence[float]) -> dict[str, float]:
    """Pearson and Spearman correlation of predicted and gold scores.

    A constant side (say, a model that predicts one score for everything early in training)
    leaves the correlations undefined; they are reported as 0 rather than NaN, so that
    comparing checkpoints by them still works.
    """
    from scipy.stats import pearsonr, spearmanr

    _check_lengths(labels, predictions)
    if len(np.unique(labels)) < 2 or len(np.unique(predictions)) < 2:
        return {"pearson": 0.0, "spearman": 0.0}
    return {"pearson": float(pearsonr(labels, predictions)[0]), "spearman": float(spearmanr(labels, predictions)[0])}


def conll_metrics(gold_tags: Sequence[Sequence[str]], predicted_tags: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity-level precision, recall and F1 exactly as the conlleval script counts them, and token accuracy.

    Args:
        gold_tags: one IOB tag sequence per sentence.
        predicted_tags: the predicted tags, as many per sentence as the gold ones.

    An entity counts as found only if its type and both its ends are right. seqeval's default
    mode reproduces conlleval, including its reading of ill-formed predictions (an I-X after
    O starts an entity).
    """
    from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score

    _check_lengths(gold_tags, predicted_tags)
    for number, (gold, predicted) in enumerate(zip(gold_tags, predicted_tags)):
        if len(gold) != len(predicted):
            raise ValueError(f"sentence {number}: {len(gold)} gold tags but {len(predicted)} predicted")
    gold_tags, predicted_tags = [list(tags) for tags in gold_tags], [list(tags) for tags in predicted_tags]
    return {
        "precision": float(precision_score(gold_tags, predicted_tags, zero_division=0)),
        "recall": float(recall_score(gold_tags, predicted_tags, zero_division=0)),
        "f1": float(f1_score(gold_tags, predicted_tags, zero_division=0)),
        "accuracy": float(accuracy_score(gold_tags, predicted_tags)),
    }


_PUNCTUATION = set(string.punctuation)


_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower-case, drop ASCII punctuation and the articles a, an, the, and collapse whitespace.

    >>> normalize_answer("The  Cat's hat.")
    'cats hat'
    """
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match_score(prediction: str, gold: str) -> float:
    """1.0 if the answers are equal once normalised, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    """F1 of the normalised answers' bags of words; two empty answers ("no answer") score 1 (evaluate-v2.0.py)."""
    predicted_words, gold_words = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted_words or not gold_words:
        return float(predicted_words == gold_words)
    same = sum((Counter(predicted_words) & Counter(gold_words)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted_words), same / len(gold_words)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(
    examples: Sequence[SpanExample], predictions: Mapping[str, str], version_2: bool | None = None
) -> dict[str, float]:
    """Exact match and F1 over SQuAD questions, each the best over the question's gold answers.

    Args:
        examples: the questions with their gold answers.
        predictions: question id -> answer text; "" predicts "no answer" (SQuAD 2.0).
        version_2: score as evaluate-v2.0.py (True) or evaluate-v1.1.py (False); by default
            as v2.0 when some question is unanswerable. The two differ only for gold answers
            that normalise to nothing (three "." answers in dev-v1.1): v1.1 keeps them (a
            prediction "." matches them exactly, with F1 0), v2.0 drops them.

    Returns:
        {"exact_match", "f1"} as fractions. With version 2.0 and some unanswerable
        questions, also "has_answer_exact_match", "has_answer_f1", "no_answer_exact_match"
        and "no_answer_f1" over each group of questions, where not empty, as
        evaluate-v2.0.py reports them.

    An unanswerable question's only gold answer is "", which "" matches with F1 1. A
    question without a prediction scores 0 (evaluate-v1.1.py's rule).
    """
    if not examples:
        raise ValueError("no SQuAD questions to score")
    if version_2 is None:
        version_2 = any(example.is_impossible for example in examples)
    exact, f1 = {}, {}
    for example in examples:
        prediction = predictions.get(example.qid)
        golds = [answer["text"] for answer in example.answers]
        if version_2:
            golds = [gold for gold in golds if normalize_answer(gold)] or [""]
        exact[example.qid] = 0.0 if prediction is None else max(exact_match_score(prediction, g) for g in golds)
        # evaluate-v1.1.py's F1 is 0 whenever the gold answer has no words
        f1[example.qid] = 0.0 if prediction is None else max(
            f1_score(prediction, g) if version_2 or normalize_answer(g) else 0.0 for g in golds)
    scores = {"exact_match": _mean(exact.values()), "f1": _mean(f1.values())}
    if version_2 and any(example.is_impossible for example in examples):
        for group, impossible in (("has_answer", False), ("no_answer", True)):
            qids = [example.qid for example in examples if example.is_impossible == impossible]
            if qids:
                scores[f"{group}_exact_match"] = _mean(exact[qid] for qid in qids)
                scores[f"{group}_f1"] = _mean(f1[qid] for qid in qids)
    return scores


def compute_metrics(spec: TaskSpec, gold, predictions, split: str = "dev") -> dict[str, float]:
    """The metrics `spec` reports for one evaluation split.

    Args:
        spec: the task.
        gold: sequence tasks: class ids or scores; token tasks: tag sequences; span tasks:
            the `SpanExample`s.
        predictions: the same for the predictions (span tasks: {question id: answer text}).
        split: the split scored; metrics of a split other than "dev" are named with its
            suffix, as in `TaskSpec.eval_splits` (MNLI's "dev_mismatched" reports
            "accuracy_mismatched").
    """
    suffix = "" if split == "dev" else "_" + split.removeprefix("dev_")
    if spec.kind == "span":
        values = squad_metrics(gold, predictions, version_2=spec.unanswerable)
    elif spec.kind == "token":
        values = conll_metrics(gold, predictions)
    elif spec.regression:
        values = regression_metrics(gold, predictions)
    else:
        values = classification_metrics(gold, predictions, [m for m in CLASSIFICATION_METRICS if m + suffix in spec.metrics])
    return {key + suffix: value for key, value in values.items()}


def _check_lengths(gold: Sequence, predictions: Sequence) -> None:
    """Refuse to score nothing, or predictions that do not pair up with the gold labels."""
    if len(gold) != len(predictions):
        raise ValueError(f"{len(gold)} gold labels but {len(predictions)} predictions")
    if len(gold) == 0:  # not `not gold`: numpy arrays have no truth value
        raise ValueError("nothing to score")


def _mean(values) -> float:
    """The mean of a non-empty iterable."""
    values = list(values)
    return sum(values) / len(values)
