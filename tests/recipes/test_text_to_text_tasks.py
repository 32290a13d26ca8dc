"""A T5 text to text on CoNLL-2003 and SQuAD (recipes/text_to_text_finetuning.py): the casts and their
round trips on real files, the cut inputs and the answers they lose, and finetune, evaluate and
predict end to end on a tiny random T5, whose reported scores must be the ones recomputed here
from its decoded outputs."""

import json

import pytest
import torch

from bertology.cli import main
from bertology.data.tokenizer import Tokenizer, train_tokenizer
from bertology.errors import UserError
from bertology.inference import runners, text_to_text
from bertology.inference.text_to_text import (
    EntityCasting,
    casting_for,
    encode_inputs,
    entity_spans,
    predict_text,
)
from bertology.models.t5 import T5Config, T5ForConditionalGeneration
from bertology.tasks.inputs import InputSettings
from bertology.tasks.metrics import conll_metrics, squad_metrics
from bertology.tasks.readers import TASKS, SpanExample, TokenExample, read_conll, read_squad

CONLL, SQUAD, SQUAD_V2 = TASKS["conll2003"], TASKS["squad"], TASKS["squad_v2"]
MARKERS = "[PER] [ORG] [LOC] [MISC] ; unanswerable"  # in every test vocabulary's text


def eu_sentence() -> TokenExample:
    """The first sentence of CoNLL-2003's training file."""
    words = "EU rejects German call to boycott British lamb .".split()
    return TokenExample("0", words, ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"], "train.txt:3")


def unigram(directory, texts: list[str], vocab_size: int = 400) -> Tokenizer:
    """An uncased unigram vocabulary (10 sentinels) learnt from `texts` and the entity markers."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "text.txt").write_text("\n".join([*texts, MARKERS]) + "\n")
    return train_tokenizer([directory / "text.txt"], vocab_size=vocab_size, model="unigram", sentinels=10,
                           out_dir=directory / "model")


# ----- CoNLL: entities as text, and back to tags ------------------------------------------------

def test_conll_cast_writes_the_entity_span_sequence():
    casting = EntityCasting(CONLL)
    example = eu_sentence()
    assert casting.source(example) == "ner: EU rejects German call to boycott British lamb ."
    assert casting.target(example) == "EU [ORG] ; German [MISC] ; British [MISC]"
    assert casting.target(TokenExample("1", ["no", "names"], ["O", "O"], "x:1")) == ""
    assert entity_spans(["B-PER", "I-PER", "B-PER", "O", "I-LOC"]) == [(0, 2, "PER"), (2, 3, "PER"), (4, 5, "LOC")]


def test_conll_outputs_are_placed_on_the_words_and_the_rest_counts_as_invalid():
    casting, example = EntityCasting(CONLL), eu_sentence()
    gold = (example.tags, True)
    assert casting.parse("EU [ORG] ; German [MISC] ; British [MISC]", example) == gold
    assert casting.parse("EU [org] ; German [misc] ; British [Misc]", example) == gold  # types in any case
    # without a vocabulary words compare as written ("german" is no word here); with one, as it spells them
    assert casting.parse("EU [ORG] ; german [MISC] ; British [MISC]", example)[1] is False
    assert casting.parse("British [MISC] ; EU [ORG]", example) == (
        ["B-ORG", "O", "O", "O", "O", "O", "B-MISC", "O", "O"], True)  # out of order: found from the start
    assert casting.parse("", example) == (["O"] * 9, True)
    # what cannot be placed is left out, and makes the output invalid
    assert casting.parse("EU [ORG] ; France [LOC]", example) == (["B-ORG"] + ["O"] * 8, False)
    assert casting.parse("EU [ORG] ; EU [ORG]", example) == (["B-ORG"] + ["O"] * 8, False)  # no second EU
    assert casting.parse("EU [ORG] and more", example) == (["B-ORG"] + ["O"] * 8, False)
    assert casting.parse("EU [PLACE]", example) == (["O"] * 9, False)
    # a name said twice goes to its next untaken occurrence
    twice = TokenExample("2", "Smith met Smith".split(), ["B-PER", "O", "B-PER"], "x:1")
    assert casting.parse("Smith [PER] ; Smith [PER]", twice) == (twice.tags, True)
    assert casting.parse("Smith [PER]", twice) == (["B-PER", "O", "O"], True)


@pytest.mark.slow
def test_conll_targets_of_200_dev_sentences_decode_back_to_their_gold_tags(data_dir):
    dev = read_conll(CONLL, data_dir / "conll2003/valid.txt")[:200]
    casting = EntityCasting(CONLL)
    assert sum(bool(entity_spans(e.tags)) for e in dev) > 100  # most of them name entities
    assert [casting.parse(casting.target(e), e) for e in dev] == [(e.tags, True) for e in dev]


@pytest.mark.slow
def test_conll_targets_decode_back_through_an_uncased_vocabulary(data_dir, tmp_path):
    """Words compared as the vocabulary writes them back (lower-cased), spaces ignored."""
    dev = read_conll(CONLL, data_dir / "conll2003/valid.txt")[:200]
    tokenizer = unigram(tmp_path, [" ".join(e.words) for e in dev])
    through = EntityCasting(CONLL, tokenizer)
    written = [tokenizer.decode(tokenizer.encode(through.target(e), add_special_tokens=False)) for e in dev]
    assert written[1] == written[1].lower() and [through.parse(w, e) for w, e in zip(written, dev)] == [
        (e.tags, True) for e in dev]


def test_a_vocabulary_that_cannot_write_the_markers_is_a_one_line_error(tmp_path):
    tokenizer = train_tokenizer_without_brackets(tmp_path)
    with pytest.raises(UserError, match=r"writes '\[PER\]' back as .*need '\[', '\]', ';'"):
        casting_for(CONLL, tokenizer)


def train_tokenizer_without_brackets(tmp_path) -> Tokenizer:
    """A vocabulary whose text had no square brackets."""
    (tmp_path / "plain.txt").write_text("the cat sat on the mat ; per org loc misc\n" * 20)
    return train_tokenizer([tmp_path / "plain.txt"], vocab_size=130, model="unigram", out_dir=tmp_path / "plain")


# ----- SQuAD: question and context -> the answer, and cut contexts ------------------------------

def test_squad_cast_is_t5s_on_real_dev_questions(data_dir):
    questions = read_squad(SQUAD_V2, data_dir / "squad/dev-v2.0.subset-Normans-Rhine.json", "dev")
    question = questions[0]
    casting = casting_for(SQUAD)
    assert casting.source(question).startswith("question: In what country is Normandy located? context: The Normans "
                                               "(Norman: Nourmands; French: Normands; Latin: Normanni) were the")
    assert casting.source(question).endswith(question.context)
    assert casting.target(question) == "France"
    assert casting.parse(" france ", question) == ("france", True)
    assert casting.parse("", question) == (None, False)  # no prediction: scored 0
    assert casting.parse("unanswerable", question) == ("unanswerable", True)  # only SQuAD 2.0 has no answer
    unanswerable = next(q for q in questions if q.is_impossible)
    v2 = casting_for(SQUAD_V2)
    assert v2.target(unanswerable) == "unanswerable" and v2.parse("Unanswerable", unanswerable) == ("", True)
    assert v2.answer_end(unanswerable, training=True) is None
    assert v2.collect([question, unanswerable], [None, ""]) == {unanswerable.qid: ""}


def test_cut_contexts_are_counted_and_so_are_the_answers_they_lose(tmp_path):
    filler = " ".join(f"w{n}" for n in range(60))
    examples = [SpanExample("short", "who?", "Ann came.", [{"text": "Ann", "answer_start": 0}], False, "x"),
                SpanExample("early", "who?", f"Ann came. {filler}", [{"text": "Ann", "answer_start": 0}], False, "x"),
                SpanExample("late", "who?", f"{filler} Ann came.",
                            [{"text": "Ann", "answer_start": len(filler) + 1}], False, "x"),
                SpanExample("both", "who?", f"Ann came. {filler} Ann came.",
                            [{"text": "Ann", "answer_start": len(filler) + 11}, {"text": "Ann", "answer_start": 0}],
                            False, "x")]
    tokenizer = unigram(tmp_path, [casting_for(SQUAD).source(e) for e in examples], vocab_size=140)
    casting = casting_for(SQUAD, tokenizer)
    training = encode_inputs(casting, tokenizer, examples, max_input=40, training=True)
    assert training.cut == [False, True, True, True] and all(len(ids) <= 40 for ids in training.ids)
    assert training.answer_cut == [False, False, True, True]  # training: the target's answer (the first)
    dev = encode_inputs(casting, tokenizer, examples, max_input=40)
    assert dev.answer_cut == [False, False, True, False]  # dev: lost only when every gold answer is
    assert tokenizer.decode(dev.ids[1]).startswith("question: who? context: ann came.")


@pytest.mark.slow
def test_the_cut_on_real_dev_questions_matches_the_tokens_before_each_answer(data_dir, tmp_path):
    questions = [q for q in read_squad(SQUAD_V2, data_dir / "squad/dev-v2.0.subset-Normans-Rhine.json", "dev")
                 if not q.is_impossible][:300]
    tokenizer = unigram(tmp_path, sorted({q.context for q in questions}), vocab_size=1000)
    casting = casting_for(SQUAD, tokenizer)
    inputs = encode_inputs(casting, tokenizer, questions, max_input=128)

    def tokens_up_to(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False, truncation=False))

    assert inputs.cut == [tokens_up_to(casting.source(q)) > 127 for q in questions]
    lost = [all(tokens_up_to(casting.source(q)[:casting.answer_end(
        SpanExample(q.qid, q.question, q.context, [a], False, q.where), False)]) > 127 for a in q.answers)
        for q in questions]
    assert inputs.answer_cut == lost and 0 < sum(lost) < sum(inputs.cut) < len(questions)


# ----- end to end: finetune, evaluate, predict --------------------------------------------------

def write_conll(path, sentences: list[TokenExample]) -> None:
    """Sentences in CoNLL columns (word, tag), a blank line after each."""
    path.write_text("".join("".join(f"{w} {t}\n" for w, t in zip(s.words, s.tags)) + "\n" for s in sentences))


def write_squad(path, paragraphs: list[dict]) -> None:
    """A SQuAD JSON file of one article."""
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))


@pytest.fixture(scope="module")
def task_files(tmp_path_factory, data_dir):
    """A tiny CoNLL-2003 folder (32 short training sentences, 8 dev ones), a tiny SQuAD v1.1 folder
    (SQuAD's first dev article: 4 paragraphs' questions to train on, 2 more to score) and a random
    tiny T5 (2+2 layers x 32, decoder limit 64) with a unigram vocabulary of their text."""
    root = tmp_path_factory.mktemp("t5_tasks")
    short = [s for s in read_conll(CONLL, data_dir / "conll2003/train.txt") if 4 <= len(s.words) <= 14]
    dev = [s for s in read_conll(CONLL, data_dir / "conll2003/valid.txt") if 4 <= len(s.words) <= 14][:8]
    (root / "conll").mkdir()
    write_conll(root / "conll/train.txt", short[:32])
    write_conll(root / "conll/valid.txt", dev)
    article = json.loads((data_dir / "squad/dev-v1.1.json").read_text())["data"][0]["paragraphs"]
    (root / "squad").mkdir()
    write_squad(root / "squad/train-v1.1.json", article[:4])
    write_squad(root / "squad/dev-v1.1.json", [article[5], article[7]])  # 53 and 128 context tokens
    texts = [" ".join(s.words) for s in short[:32] + dev] + [p["context"] for p in article[:8]] + [
        qa["question"] for p in article[:8] for qa in p["qas"]]
    tokenizer = unigram(root / "vocab", texts, vocab_size=600)
    torch.manual_seed(0)
    T5ForConditionalGeneration(T5Config(
        vocab_size=tokenizer.vocab_size, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, n_positions=64,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.sep_token_id,
        decoder_start_token_id=tokenizer.pad_token_id)).save_pretrained(root / "vocab/model")
    return root


def decoded(model_dir, examples, max_seq_len: int) -> list[str]:
    """The fine-tuned T5's greedy outputs for examples, decoded here from its directory."""
    model, tokenizer = T5ForConditionalGeneration.from_pretrained(model_dir), Tokenizer.from_pretrained(model_dir)
    spec = {TokenExample: CONLL, SpanExample: SQUAD}[type(examples[0])]
    casting = casting_for(spec, tokenizer, InputSettings(max_seq_len))
    limits = [min(n, 64) for n in casting.answer_limits(tokenizer, examples)]
    return predict_text(model, tokenizer, encode_inputs(casting, tokenizer, examples, max_seq_len).ids, limits)


def gold_then_wrong(casting, tokenizer, examples, wrong: str) -> list[str]:
    """Outputs to stand in for generation: the gold target as the vocabulary writes it back for even
    examples, `wrong` for odd ones."""
    return [tokenizer.decode(tokenizer.encode(casting.target(e), add_special_tokens=False)) if n % 2 == 0 else wrong
            for n, e in enumerate(examples)]


def generating(monkeypatch, texts: list[str]) -> None:
    """Make the T5's generation return `texts` (in the order of the examples), to score known outputs."""
    for module in (text_to_text, runners):  # decoding for evaluate and predict; serve's answers
        monkeypatch.setattr(module, "predict_text", lambda model, tokenizer, inputs, *args: texts[:len(inputs)])


@pytest.mark.slow
def test_t5_finetunes_on_conll_and_evaluate_and_predict_give_the_decoded_entity_f1(task_files, tmp_path, capsys,
                                                                                    monkeypatch):
    out = tmp_path / "ner"
    assert main(["finetune", "--task", "conll2003", "--data", str(task_files / "conll"), "--model",
                 str(task_files / "vocab/model"), "--out", str(out), "--epochs", "2", "--batch-size", "8", "--lr",
                 "3e-3", "--precision", "fp32", "--no-progress", "--no-learning-curve"]) == 0
    trained = json.loads((out / "eval_results.json").read_text())
    assert main(["evaluate", "--model", str(out), "--data", str(task_files / "conll"), "--out",
                 str(tmp_path / "eval.json")]) == 0
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    dev = read_conll(CONLL, task_files / "conll/valid.txt")
    tokenizer = Tokenizer.from_pretrained(out)
    casting = casting_for(CONLL, tokenizer)
    parsed = [casting.parse(text, sentence) for text, sentence in zip(decoded(out, dev, 128), dev)]
    recomputed = conll_metrics([s.tags for s in dev], [tags for tags, _ in parsed])
    for key in ("precision", "recall", "f1", "accuracy"):
        assert evaluated[key] == pytest.approx(recomputed[key]) == pytest.approx(trained[key]), key
    assert evaluated["invalid"] == sum(not valid for _, valid in parsed) / len(dev) == trained["invalid"]
    assert evaluated["inputs_cut"] == evaluated["answers_cut"] == 0
    # predict reads CoNLL's valid.txt as CoNLL and writes CoNLL columns with those tags
    capsys.readouterr()
    assert main(["predict", "--model", str(out), "--input", str(task_files / "conll/valid.txt"), "--out",
                 str(tmp_path / "tags.conll")]) == 0
    invalid = sum(not valid for _, valid in parsed)
    assert (f"{invalid} of {len(dev)} outputs could not be read as answers; in their place: the tags of the "
            "entities that could be placed" in capsys.readouterr().err) == (invalid > 0)
    blocks = [block for block in (tmp_path / "tags.conll").read_text().split("\n\n") if block.strip()]
    assert [[line.split()[2] for line in block.splitlines()] for block in blocks] == [tags for tags, _ in parsed]
    # a random tiny T5 names no entity yet: evaluate known outputs too, half of them right
    outputs = gold_then_wrong(casting, tokenizer, dev, wrong="lamb [PER]")
    generating(monkeypatch, outputs)
    assert main(["evaluate", "--model", str(out), "--data", str(task_files / "conll"), "--out",
                 str(tmp_path / "known.json")]) == 0
    known = json.loads((tmp_path / "known.json").read_text())
    expected = conll_metrics([s.tags for s in dev], [casting.parse(text, s)[0] for text, s in zip(outputs, dev)])
    assert 0 < expected["f1"] < 1 and known["f1"] == pytest.approx(expected["f1"])
    assert known["invalid"] == 0.5  # no "lamb" in those sentences


@pytest.mark.slow
def test_t5_finetunes_on_squad_drops_cut_answers_and_scores_its_decoded_answers(task_files, tmp_path, capsys,
                                                                                  monkeypatch):
    out = tmp_path / "qa"
    assert main(["finetune", "--task", "squad", "--data", str(task_files / "squad"), "--model",
                 str(task_files / "vocab/model"), "--out", str(out), "--epochs", "1", "--batch-size", "16", "--lr",
                 "3e-3", "--max-seq-len", "128", "--precision", "fp32", "--no-progress", "--no-learning-curve"]) == 0
    train = read_squad(SQUAD, task_files / "squad/train-v1.1.json", "train")
    tokenizer = Tokenizer.from_pretrained(out)
    casting = casting_for(SQUAD, tokenizer)
    inputs = encode_inputs(casting, tokenizer, train, 128, training=True)
    assert 0 < sum(inputs.answer_cut) < sum(inputs.cut)
    assert (f"{sum(inputs.cut)} of {len(train)} training inputs are longer than 128 tokens and were cut; "
            f"{sum(inputs.answer_cut)} of them lost their answer with it and were dropped") in capsys.readouterr().err
    config = json.loads((out / "finetune_config.json").read_text())
    assert config["train_examples"] == len(train) - sum(inputs.answer_cut)
    assert main(["evaluate", "--model", str(out), "--data", str(task_files / "squad"), "--out",
                 str(tmp_path / "eval.json")]) == 0
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    assert main(["predict", "--model", str(out), "--input", str(task_files / "squad/dev-v1.1.json"), "--out",
                 str(tmp_path / "answers.json")]) == 0
    answers = json.loads((tmp_path / "answers.json").read_text())
    dev = read_squad(SQUAD, task_files / "squad/dev-v1.1.json", "dev")
    texts = decoded(out, dev, 128)
    assert answers == {q.qid: text.strip() for q, text in zip(dev, texts)}
    recomputed = squad_metrics(dev, {qid: answer for qid, answer in answers.items() if answer})
    assert (evaluated["exact_match"], evaluated["f1"]) == pytest.approx((recomputed["exact_match"], recomputed["f1"]))
    assert evaluated["invalid"] == sum(not text.strip() for text in texts) / len(dev)
    cut = encode_inputs(casting, tokenizer, dev, 128)
    assert 0 < sum(cut.cut) < len(dev)
    assert (evaluated["inputs_cut"], evaluated["answers_cut"]) == (sum(cut.cut) / len(dev),
                                                                  sum(cut.answer_cut) / len(dev))
    # known outputs: every other one the first gold answer, the rest empty (invalid, scored 0)
    generating(monkeypatch, gold_then_wrong(casting, tokenizer, dev, wrong=""))
    assert main(["evaluate", "--model", str(out), "--data", str(task_files / "squad"), "--out",
                 str(tmp_path / "known.json")]) == 0
    known = json.loads((tmp_path / "known.json").read_text())
    assert known["exact_match"] == pytest.approx(len(dev[::2]) / len(dev))
    assert known["invalid"] == pytest.approx(len(dev[1::2]) / len(dev))


@pytest.mark.slow
def test_a_conll_target_longer_than_the_decoder_is_a_one_line_error(task_files, tmp_path, capsys):
    long = TokenExample("0", [f"Name{n}" for n in range(25)], ["B-PER"] * 25, "x")
    (tmp_path / "conll").mkdir()
    write_conll(tmp_path / "conll/train.txt", [eu_sentence(), long])
    write_conll(tmp_path / "conll/valid.txt", [eu_sentence()])
    status = main(["finetune", "--task", "conll2003", "--data", str(tmp_path / "conll"), "--model",
                   str(task_files / "vocab/model"), "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1
    assert "train.txt:11: the target 'Name0 [PER] ; Name1 [PER]" in err[0]
    assert "the decoder takes 64 (n_positions)" in err[0]


@pytest.mark.slow
def test_a_t5_refuses_windows_in_one_line(task_files, tmp_path, capsys):
    status = main(["finetune", "--task", "conll2003", "--data", str(task_files / "conll"), "--model",
                   str(task_files / "vocab/model"), "--out", str(tmp_path / "o"), "--long-inputs", "window"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "a text-to-text model's inputs are cut at --max-seq-len" in err[0]
