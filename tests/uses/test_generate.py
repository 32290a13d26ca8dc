"""`bertology generate`: prompts in, prompt + continuation out (a GPT) or the output (a T5), as
the Python API computes them; stop strings, batches, and every bad input a one-line error."""

import functools
import json

import pytest
import torch
from helpers import save_tiny_gpt, save_tiny_t5

from bertology.cli import main
from bertology.errors import UserError
from bertology.inference.generation import GenerationConfig, generate
from bertology.models.bert import BertConfig, BertModel
from bertology.uses.generate import generate_text, load_generator


@pytest.fixture(scope="module")
def gpt_dir(tmp_path_factory):
    return save_tiny_gpt(tmp_path_factory.mktemp("gpt"))


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    return save_tiny_t5(tmp_path_factory.mktemp("t5"))


def run(capsys, *args):
    status = main(["generate", *args])
    out, err = capsys.readouterr()
    return status, out, err


def generated_by_the_command(capsys, model_dir, prompts, out_file):
    """Run `generate` on `prompts` (8 new tokens, --out `out_file`); return its printed lines, the
    JSON records it wrote, what the Python API computes for the same prompts, and the model and
    tokenizer."""
    status, out, _ = run(capsys, "--model", str(model_dir), "--prompt", *prompts, "--max-new-tokens", "8",
                         "--out", str(out_file))
    assert status == 0
    model, tokenizer = load_generator(model_dir)
    computed = generate_text(model, tokenizer, prompts, GenerationConfig(max_new_tokens=8))
    records = [json.loads(line) for line in out_file.read_text().splitlines()]
    return out.splitlines(), records, computed, model, tokenizer


def test_prints_each_prompt_with_its_continuation_as_the_api_computes_it(gpt_dir, capsys, tmp_path):
    prompts = ["the cat", "import os and sys to"]
    lines, records, continuations, model, tokenizer = generated_by_the_command(capsys, gpt_dir, prompts,
                                                                               tmp_path / "out.jsonl")
    assert lines == [p + c for p, c in zip(prompts, continuations)]
    assert all(c.strip() for c in continuations)  # random weights still add tokens
    assert records == [{"prompt": p, "continuation": c} for p, c in zip(prompts, continuations)]
    # the continuation is the decoded greedy tokens after [CLS] + the prompt's pieces
    ids = torch.tensor([[tokenizer.cls_token_id] + tokenizer.encode(prompts[0], add_special_tokens=False)])
    new = generate(model, ids, config=GenerationConfig(max_new_tokens=8))[0, ids.shape[1]:].tolist()
    if tokenizer.sep_token_id in new:
        new = new[:new.index(tokenizer.sep_token_id)]
    assert continuations[0].strip() == tokenizer.decode(new)


def test_batches_give_what_each_prompt_gives_alone(gpt_dir):
    model, tokenizer = load_generator(gpt_dir)
    prompts = ["the cat", "a dog ran in the park after", "the", "the module reads a file"]
    config = GenerationConfig(max_new_tokens=6)
    together = generate_text(model, tokenizer, prompts, config, batch_size=4)
    alone = [generate_text(model, tokenizer, [p], config, batch_size=1)[0] for p in prompts]
    assert together == alone


def test_a_stop_string_ends_the_continuation_before_it(gpt_dir):
    model, tokenizer = load_generator(gpt_dir)
    free = generate_text(model, tokenizer, ["the cat"], GenerationConfig(max_new_tokens=10))[0]
    words = free.split()
    assert len(words) >= 3, free
    stop = words[2]
    cut = generate_text(model, tokenizer, ["the cat"], GenerationConfig(max_new_tokens=10), stop=[stop])[0]
    assert cut == free[:free.find(stop)] and stop not in cut


def test_sampling_follows_the_seed(gpt_dir, capsys):
    args = ["--model", str(gpt_dir), "--prompt", "the cat", "--do-sample", "--max-new-tokens", "12"]
    outputs = [run(capsys, *args, "--seed", str(seed))[1] for seed in (1, 1, 2)]
    assert outputs[0] == outputs[1] and outputs[0] != outputs[2]


@pytest.mark.parametrize("args, message", [
    (["--prompt", "  "], "prompt 1 is empty"),
    (["--prompt", "the cat", "--max-new-tokens", "60"], "does not fit the model's context of 48 tokens"),
    (["--prompt", "the cat", "--top-p", "1.5"], "top_p (--top-p) must be in (0, 1], got 1.5"),
    (["--prompt", "x", "--num-beams", "2", "--do-sample"], "choose beam search or sampling"),
    (["--prompt", "x", "--num-beams", "2", "--compile"], "compile (--compile) compiles the static cache's decode step"),
    ([], "nothing to continue: give --prompt TEXT or --input FILE"),
    (["--input", "no-such-file.txt"], "no-such-file.txt: no such file")])
def test_bad_input_is_one_line(gpt_dir, capsys, args, message):
    status, out, err = run(capsys, "--model", str(gpt_dir), *args)
    assert status == 2 and not out
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_an_encoder_is_refused_with_the_reason(gpt_dir, tmp_path, capsys):
    BertModel(BertConfig.from_preset("tiny", vocab_size=160)).save_pretrained(tmp_path / "bert")
    status, _, err = run(capsys, "--model", str(tmp_path / "bert"), "--prompt", "the cat")
    assert status == 2 and "a bert model, which does not generate text; generate needs a GPT or a T5" in err


def test_prompts_from_a_file(gpt_dir, tmp_path, capsys):
    (tmp_path / "prompts.txt").write_text("the cat\n\na dog\n")
    status, out, _ = run(capsys, "--model", str(gpt_dir), "--input", str(tmp_path / "prompts.txt"),
                         "--max-new-tokens", "3")
    lines = out.splitlines()
    assert status == 0 and len(lines) == 2 and lines[0].startswith("the cat") and lines[1].startswith("a dog")


def test_t5_prints_its_output_as_the_decoder_writes_it(t5_dir, capsys, tmp_path):
    prompts = ["a <extra_id_0> ran in the <extra_id_1>", "import os and sys to read the path"]
    lines, records, outputs, model, tokenizer = generated_by_the_command(capsys, t5_dir, prompts,
                                                                         tmp_path / "out.jsonl")
    assert lines == outputs and all(o.strip() for o in outputs)
    assert records == [{"prompt": p, "output": o} for p, o in zip(prompts, outputs)]
    # the output is the decoder's greedy tokens after its start token, for the input's tokens + [SEP]
    ids = torch.tensor([tokenizer.encode(prompts[0], add_special_tokens=False) + [tokenizer.sep_token_id]])
    assert tokenizer.sentinel_token_ids[0] in ids[0].tolist()  # the sentinel is one token, not its letters
    new = generate(model, ids, config=GenerationConfig(max_new_tokens=8, eos_token_id=tokenizer.sep_token_id))
    assert new[0, 0] == model.config.decoder_start_token_id
    new = new[0, 1:].tolist()
    if tokenizer.sep_token_id in new:
        new = new[:new.index(tokenizer.sep_token_id)]
    assert outputs[0] == tokenizer.decode(new, skip_special_tokens=False)


def test_t5_batches_give_what_each_input_gives_alone(t5_dir):
    model, tokenizer = load_generator(t5_dir)
    prompts = ["the cat", "a dog ran in the park after a ball and", "the", "the module reads a file"]
    for config in (GenerationConfig(max_new_tokens=6), GenerationConfig(max_new_tokens=6, num_beams=3)):
        together = generate_text(model, tokenizer, prompts, config, batch_size=4)
        alone = [generate_text(model, tokenizer, [p], config, batch_size=1)[0] for p in prompts]
        assert together == alone


@pytest.mark.parametrize("args, message", [
    (["--prompt", "  "], "prompt 1 is empty: give some text to transform"),
    (["--prompt", " ".join(["cat"] * 70)], "more than the model's input limit of 64 tokens"),
    (["--prompt", "the cat", "--max-new-tokens", "64"], "longer than the model's decoder limit of 63 tokens"),
    (["--prompt", "the cat", "--top-p", "1.5"], "top_p (--top-p) must be in (0, 1], got 1.5"),
    (["--prompt", "the cat", "--compile"], "has no static key/value cache whose decode step could be compiled")])
def test_t5_bad_input_is_one_line(t5_dir, capsys, args, message):
    status, out, err = run(capsys, "--model", str(t5_dir), *args)
    assert status == 2 and not out
    assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("settings, message", [
    ({"do_sample": True, "temperature": float("inf")}, "temperature (--temperature) must be positive and finite"),
    ({"do_sample": True, "temperature": float("nan")}, "temperature (--temperature) must be positive and finite"),
    ({"num_beams": 3, "length_penalty": -1e9}, "length_penalty must be a number from -10.0 to 10.0, got -1000000000.0"),
    ({"num_beams": 3, "length_penalty": float("nan")}, "length_penalty must be a number from -10.0 to 10.0"),
    ({"num_beams": 1000}, "num_beams (--num-beams) 1000 is more than the model's"),
    ({"max_new_tokens": 10**9}, "max_new_tokens (--max-new-tokens) 1000000000 after a prompt of 2 tokens goes beyond"),
])
def test_generation_settings_the_model_cannot_run_are_one_line_errors(gpt_dir, settings, message):
    """Through the Python API (the command line checks its context itself): uniform sampling at
    temperature inf, a division by zero at length_penalty -1e9, more beams than the vocabulary has
    tokens, and positions beyond the model's all ran (or crashed) before."""
    model, tokenizer = load_generator(gpt_dir)
    with pytest.raises(UserError) as error:
        generate(model, torch.tensor([[1, 5]]), config=GenerationConfig(**{"max_new_tokens": 3, **settings}))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_lone_surrogate_or_a_control_in_a_prompt_is_normalised(gpt_dir, capsys, tmp_path):
    """A lone surrogate (from a JSON escape, or a non-UTF-8 byte in argv) gave TypeError: TextEncodeInput."""
    model, tokenizer = load_generator(gpt_dir)
    odd, clean = generate_text(model, tokenizer, ["the cat\ud800 sat\x00", "the cat\ufffd sat "],
                               GenerationConfig(max_new_tokens=4))
    assert odd == clean
    status, out, err = run(capsys, "--model", str(gpt_dir), "--prompt", "the cat\udcff sat", "--max-new-tokens", "2",
                           "--out", str(tmp_path / "out.jsonl"))
    assert status == 0 and out.startswith("the cat\ufffd sat"), err
    assert json.loads((tmp_path / "out.jsonl").read_text())["prompt"] == "the cat\ufffd sat"


def test_a_seed_outside_the_generators_range_is_one_line(gpt_dir):
    model, tokenizer = load_generator(gpt_dir)
    for seed in (-1, 2**64):
        with pytest.raises(UserError, match="seed \\(--seed\\) must be an integer from 0 to 4,294,967,295"):
            generate_text(model, tokenizer, ["the cat"], GenerationConfig(do_sample=True), seed=seed)


@pytest.mark.slow
def test_compile_prints_what_the_eager_steps_give(gpt_dir, capsys, monkeypatch):
    """--compile reaches the decode step (dynamo's aot_eager backend here: inductor's build takes
    minutes on this machine) and changes no token, greedy or sampled."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    torch._dynamo.reset()
    prompts = ["the cat", "import os and sys to", "a"]
    for sampling in ([], ["--do-sample", "--seed", "3"]):
        eager = run(capsys, "--model", str(gpt_dir), "--prompt", *prompts, "--max-new-tokens", "12", *sampling)
        compiled = run(capsys, "--model", str(gpt_dir), "--prompt", *prompts, "--max-new-tokens", "12", "--compile",
                       *sampling)
        assert eager[0] == compiled[0] == 0 and compiled[1] == eager[1], compiled[2]
        assert "compiling took" in compiled[2] and "compiling took" not in eager[2]
    torch._dynamo.reset()
