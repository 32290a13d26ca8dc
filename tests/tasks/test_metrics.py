"""Tests for bertology.tasks.metrics: values worked out by hand, and agreement with scikit-learn, scipy and seqeval."""

import math

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bertology.tasks import metrics
from bertology.tasks.metrics import (
    classification_metrics,
    compute_metrics,
    conll_metrics,
    exact_match_score,
    normalize_answer,
    regression_metrics,
    squad_metrics,
)
from bertology.tasks.readers import TASKS, SpanExample, read_examples


@pytest.mark.filterwarnings("ignore:A single label was found")  # sklearn's, for the all-0 case below
def test_classification_by_hand():
    # gold 1 0 1 1 0, predicted 1 0 0 1 1: tp 2, tn 1, fp 1, fn 1
    values = classification_metrics([1, 0, 1, 1, 0], [1, 0, 0, 1, 1], ["accuracy", "f1", "mcc"])
    assert values == pytest.approx({"accuracy": 3 / 5, "f1": 2 / 3, "mcc": (2 * 1 - 1 * 1) / math.sqrt(3 * 3 * 2 * 2)})
    assert classification_metrics([1, 0], [1, 0], ["accuracy"]) == {"accuracy": 1.0}
    assert classification_metrics([0, 0], [0, 0], ["f1", "mcc"]) == {"f1": 0.0, "mcc": 0.0}  # undefined: 0
    with pytest.raises(ValueError, match="unknown classification metrics"):
        classification_metrics([0], [0], ["auc"])


def test_classification_matches_sklearn():
    rng = np.random.default_rng(0)
    gold, predicted = rng.integers(0, 2, 500).tolist(), rng.integers(0, 2, 500).tolist()
    values = classification_metrics(gold, predicted)
    assert values["accuracy"] == pytest.approx(accuracy_score(gold, predicted))
    assert values["f1"] == pytest.approx(f1_score(gold, predicted))
    assert values["mcc"] == pytest.approx(matthews_corrcoef(gold, predicted))
    three = rng.integers(0, 3, 500).tolist()
    assert classification_metrics(three, predicted, ["mcc"])["mcc"] == pytest.approx(matthews_corrcoef(three, predicted))
    assert all(isinstance(value, float) for value in values.values())


def test_regression():
    gold = [0.0, 1.0, 2.0, 3.0, 4.0]
    values = regression_metrics(gold, [x**3 for x in gold])  # monotone but not linear
    assert values["spearman"] == pytest.approx(1.0) and values["pearson"] < 0.95
    assert regression_metrics(gold, [2 * x + 1 for x in gold])["pearson"] == pytest.approx(1.0)
    assert regression_metrics(gold, [2.5] * 5) == {"pearson": 0.0, "spearman": 0.0}  # constant: undefined, not NaN
    rng = np.random.default_rng(1)
    gold, predicted = rng.uniform(0, 5, 200).tolist(), rng.uniform(0, 5, 200).tolist()
    assert regression_metrics(gold, predicted) == pytest.approx(
        {"pearson": pearsonr(gold, predicted)[0], "spearman": spearmanr(gold, predicted)[0]})


def test_conll_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]  # 2 of 3 entities found, 2 of 3 predicted right
    assert conll_metrics(gold, predicted) == pytest.approx(
        {"precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3, "accuracy": 5 / 6})
    # conlleval's reading: an I- tag after O starts an entity, and a wrong end misses it
    assert conll_metrics([["B-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]])["f1"] == 1.0
    assert conll_metrics([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])["f1"] == 0.0
    assert conll_metrics([["O", "O"]], [["O", "O"]]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 1.0}
    with pytest.raises(ValueError, match="sentence 0: 2 gold tags but 1 predicted"):
        conll_metrics([["O", "O"]], [["O"]])


@pytest.mark.slow
def test_conll_on_the_validation_set(data_dir):
    examples = read_examples(TASKS["conll2003"], data_dir / "conll2003/valid.txt", "dev")
    gold = [e.tags for e in examples]
    assert conll_metrics(gold, gold) == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "accuracy": 1.0}
    # Drop every PER entity: recall falls by PER's share of the entities, precision stays 1.
    no_people = [[("O" if tag.endswith("PER") else tag) for tag in tags] for tags in gold]
    entities = sum(tag.startswith("B-") for tags in gold for tag in tags)
    people = sum(tag == "B-PER" for tags in gold for tag in tags)
    values = conll_metrics(gold, no_people)
    assert values["precision"] == 1.0
    assert values["recall"] == pytest.approx((entities - people) / entities)
    assert (entities, people) == (5942, 1842)  # CoNLL-2003 dev's entity counts


def test_normalize_answer():
    assert normalize_answer("The Cat.") == normalize_answer("cat") == "cat"
    assert normalize_answer("  An   apple,  a pear & THE plum!") == "apple pear plum"
    assert normalize_answer("theory") == "theory"  # "the" only as a whole word
    assert normalize_answer("Denver's Broncos") == "denvers broncos"
    assert exact_match_score("The Cat.", "cat") == 1.0
    assert exact_match_score("a cat", "cats") == 0.0


def test_squad_f1_partial_overlap():
    # predicted words: big red dog; gold: red dog barked -> 2 shared: precision 2/3, recall 2/3
    assert metrics.f1_score("the big red dog", "red dog barked") == pytest.approx(2 / 3)
    # 1 shared of 1 predicted and 4 gold: precision 1, recall 1/4
    assert metrics.f1_score("Paris", "Paris, in France, Europe") == pytest.approx(2 * 0.25 / 1.25)
    assert metrics.f1_score("London", "Paris") == 0.0
    assert metrics.f1_score("", "") == 1.0 and metrics.f1_score("", "Paris") == 0.0


def span(qid, *answers, impossible=False):
    return SpanExample(qid, "Q?", "context", [{"text": a, "answer_start": 0} for a in answers], impossible, "f")


def test_squad_metrics_by_hand():
    examples = [span("q1", "Denver Broncos", "The Broncos"), span("q2", "Paris"), span("q3", "1999")]
    predictions = {"q1": "broncos", "q2": "Paris, France"}  # q3 unanswered: scores 0
    values = squad_metrics(examples, predictions)
    # q1: EM 1 against "The Broncos"; q2: EM 0, F1 2*(1/2*1)/(1/2+1) = 2/3
    assert values == pytest.approx({"exact_match": 1 / 3, "f1": (1 + 2 / 3 + 0) / 3})


def test_squad_gold_answers_without_words():
    example = [span("q1", ".", "Paris")]
    assert squad_metrics(example, {"q1": "."}, version_2=False) == {"exact_match": 1.0, "f1": 0.0}
    assert squad_metrics(example, {"q1": "."}, version_2=True) == {"exact_match": 0.0, "f1": 0.0}
    assert squad_metrics(example, {"q1": "Paris"}, version_2=False) == {"exact_match": 1.0, "f1": 1.0}


def test_squad_v2_no_answer():
    examples = [span("q1", "Paris"), span("q2", impossible=True), span("q3", impossible=True)]
    values = squad_metrics(examples, {"q1": "Paris", "q2": "", "q3": "London"})
    assert values == pytest.approx({
        "exact_match": 2 / 3, "f1": 2 / 3,
        "has_answer_exact_match": 1.0, "has_answer_f1": 1.0,
        "no_answer_exact_match": 0.5, "no_answer_f1": 0.5,
    })


@pytest.mark.slow
def test_squad_metrics_on_real_files(data_dir):
    dev = read_examples(TASKS["squad"], data_dir / "squad/dev-v1.1.json", "dev")
    assert squad_metrics(dev, {e.qid: e.answers[0]["text"] for e in dev}) == {"exact_match": 1.0, "f1": 1.0}
    # Three questions have a gold answer "." (it normalises to nothing): evaluate-v1.1.py counts
    # the prediction "." as an exact match with F1 0; evaluate-v2.0.py ignores such answers.
    dots = {e.qid: "." for e in dev if any(a["text"] == "." for a in e.answers)}
    assert len(dots) == 3
    predictions = {e.qid: e.answers[0]["text"] for e in dev} | dots
    assert squad_metrics(dev, predictions) == pytest.approx({"exact_match": 1.0, "f1": 1 - 3 / len(dev)})
    assert squad_metrics(dev, predictions, version_2=True) == pytest.approx(
        {"exact_match": 1 - 3 / len(dev), "f1": 1 - 3 / len(dev)})
    v2 = read_examples(TASKS["squad_v2"], data_dir / "squad/dev-v2.0.subset-Normans-Rhine.json", "dev")
    values = squad_metrics(v2, {e.qid: "" for e in v2})  # "no answer" everywhere: right on the 320 unanswerable
    assert values["exact_match"] == values["f1"] == pytest.approx(320 / 706)
    assert values["no_answer_f1"] == 1.0 and values["has_answer_f1"] == 0.0


def test_compute_metrics_per_task():
    assert compute_metrics(TASKS["sst2"], [1, 0], [1, 1]) == {"accuracy": 0.5}
    assert set(compute_metrics(TASKS["mrpc"], [1, 0], [1, 1])) == {"accuracy", "f1"}
    assert compute_metrics(TASKS["mnli"], [0, 1, 2], [0, 1, 1]) == pytest.approx({"accuracy": 2 / 3})
    assert compute_metrics(TASKS["mnli"], [0, 1], [0, 0], split="dev_mismatched") == {"accuracy_mismatched": 0.5}
    assert set(compute_metrics(TASKS["stsb"], [1.0, 2.0, 3.0], [1.0, 3.0, 2.0])) == {"pearson", "spearman"}
    assert compute_metrics(TASKS["conll2003"], [["B-PER"]], [["B-PER"]])["f1"] == 1.0
    assert compute_metrics(TASKS["squad"], [span("q1", "Paris")], {"q1": "paris"}) == {"exact_match": 1.0, "f1": 1.0}
    for spec in TASKS.values():
        assert spec.main_metric in spec.metrics


def test_numpy_arrays_are_scored_like_lists():
    """Predictions often come out of a model as numpy arrays: `if not gold` used to raise on them."""
    gold, predicted = np.array([1, 0, 1, 1, 0]), np.array([1, 0, 0, 1, 1])
    assert classification_metrics(gold, predicted) == classification_metrics(gold.tolist(), predicted.tolist())
    scores, guesses = np.array([0.1, 0.5, 0.2, 0.9]), np.array([0.2, 0.4, 0.3, 0.8])
    assert regression_metrics(scores, guesses) == pytest.approx({"pearson": pearsonr(scores, guesses)[0],
                                                                 "spearman": 1.0})
    with pytest.raises(ValueError, match="nothing to score"):
        classification_metrics(np.array([]), np.array([]))
