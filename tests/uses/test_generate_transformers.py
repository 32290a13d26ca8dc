"""`bertology generate` on GPT-2 and T5 directories as transformers writes them (the model's and the
tokenizer's save_pretrained, random weights), and on what bertology writes back from them: greedy and
4-beam outputs over 20 WikiText-2 prompts identical to transformers' `generate` on the same prompt ids
(GPT-2: <|endoftext|> then the prompt's tokens, as bertology frames a prompt; T5: the tokens then </s>);
sampling's filtering gives the distribution transformers' warpers give."""

import json

import pytest
import torch
import transformers

from bertology.cli import main
from bertology.data.tokenizer import Tokenizer
from bertology.inference.generation import filter_logits
from bertology.inference.modeldir import load_model

NEW_TOKENS = 12


@pytest.fixture(scope="module")
def prompts(data_dir) -> list[str]:
    """The first eight words of 20 WikiText-2 test lines (headings left out)."""
    lines = (data_dir / "wikitext-2-raw/wiki.test.raw").read_text(encoding="utf-8").split("\n")
    return [" ".join(line.split()[:8]) for line in lines if line.strip() and not line.strip().startswith("=")][:20]


def random_weights(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every tensor drawn at std 0.3 (LayerNorms too), so that continuations vary from prompt to prompt."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    return model.eval()


def transformers_gpt2(tokenizer_dir, directory):
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    config = transformers.GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    random_weights(transformers.GPT2LMHeadModel(config), seed=0).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def transformers_t5(tokenizer_dir, directory, version: str):
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    layout = {"v1.0": dict(feed_forward_proj="relu", tie_word_embeddings=True),
              "v1.1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)}[version]
    config = transformers.T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
                                   pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                   decoder_start_token_id=tokenizer.pad_token_id, **layout)
    random_weights(transformers.T5ForConditionalGeneration(config), seed=1).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def rewritten_by_bertology(directory, out):
    """The directory loaded by bertology and saved again, model and tokenizer."""
    load_model(directory).save_pretrained(out)
    Tokenizer.from_pretrained(directory).save_pretrained(out)
    return out


def transformers_outputs(directory, prompts: list[str], num_beams: int) -> list[str]:
    """What transformers generates for each prompt alone, as text: a GPT-2's prompt and continuation,
    a T5's output (sentinels kept)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    seq2seq = transformers.AutoConfig.from_pretrained(directory).is_encoder_decoder
    model_class = transformers.AutoModelForSeq2SeqLM if seq2seq else transformers.AutoModelForCausalLM
    model = model_class.from_pretrained(directory).eval()
    eos = tokenizer.eos_token_id
    texts = []
    for prompt in prompts:
        ids = tokenizer(prompt)["input_ids"] if seq2seq else [tokenizer.bos_token_id, *tokenizer(prompt)["input_ids"]]
        output = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                max_new_tokens=NEW_TOKENS, num_beams=num_beams, do_sample=False,
                                pad_token_id=tokenizer.pad_token_id if seq2seq else eos, eos_token_id=eos)[0].tolist()
        new = output[1:] if seq2seq else output[len(ids):]
        new = new[:new.index(eos)] if eos in new else new
        if seq2seq:
            texts.append(tokenizer.decode([i for i in new if i != tokenizer.pad_token_id], skip_special_tokens=False))
        else:
            texts.append(tokenizer.decode(ids[1:] + new))
    return texts


def bertology_outputs(capsys, tmp_path, directory, prompts: list[str], num_beams: int) -> list[str]:
    """What `bertology generate` writes for the prompts (in batches of 8): a GPT's prompt and
    continuation, a T5's output."""
    out = tmp_path / f"generated-{num_beams}.jsonl"
    status = main(["generate", "--model", str(directory), "--prompt", *prompts, "--max-new-tokens", str(NEW_TOKENS),
                   "--num-beams", str(num_beams), "--out", str(out)])
    _, err = capsys.readouterr()
    assert status == 0, err
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return [r["output"] if "output" in r else r["prompt"] + r["continuation"] for r in records]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "t5 v1.0", "t5 v1.1"])
def test_greedy_and_beam_outputs_equal_transformers_generate_on_both_directories(
        family, transformers_tokenizers, prompts, tmp_path, capsys):
    model_type, _, version = family.partition(" ")
    tokenizer_dir = transformers_tokenizers[model_type][1]
    if model_type == "gpt2":
        theirs = transformers_gpt2(tokenizer_dir, tmp_path / "theirs")
    else:
        theirs = transformers_t5(tokenizer_dir, tmp_path / "theirs", version)
    ours = rewritten_by_bertology(theirs, tmp_path / "ours")
    for num_beams in (1, 4):
        expected = transformers_outputs(theirs, prompts, num_beams)
        assert len(set(expected)) > 10  # random weights that continue each prompt differently
        assert bertology_outputs(capsys, tmp_path, theirs, prompts, num_beams) == expected, num_beams
        assert transformers_outputs(ours, prompts, num_beams) == expected, num_beams
        assert bertology_outputs(capsys, tmp_path, ours, prompts, num_beams) == expected, num_beams


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 10, 0.9), (1.3, None, 0.5), (1.0, 5, None),
                                                       (0.5, 50, 0.99)])
def test_sampling_filters_the_logits_as_transformers_warpers_do(temperature, top_k, top_p):
    logits = 3 * torch.randn(6, 100, generator=torch.Generator().manual_seed(0))
    expected = transformers.TemperatureLogitsWarper(temperature)(None, logits)
    if top_k is not None:
        expected = transformers.TopKLogitsWarper(top_k)(None, expected)
    if top_p is not None:
        expected = transformers.TopPLogitsWarper(top_p)(None, expected)
    got = filter_logits(logits, temperature, top_k, top_p)
    kept = torch.isfinite(expected)
    assert torch.equal(torch.isfinite(got), kept) and 0 < kept.sum() < kept.numel()
    # filter_logits shifts each row's largest logit to 0 first: the same distribution to sample from.
    torch.testing.assert_close(got.softmax(-1), expected.softmax(-1), rtol=0, atol=1e-6)
