"""`save_random_weights`: the from-scratch twin of a model directory, for the demo and the claims."""

import pytest
from helpers import save_tiny_t5, save_tiny_vectors
from safetensors.torch import load_file

from bertology.data.tokenizer import Tokenizer
from bertology.errors import UserError
from bertology.inference.modeldir import save_random_weights
from bertology.models.bert import BertConfig
from bertology.models.t5 import T5Config


def weights(directory):
    return load_file(str(directory / "model.safetensors"))


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


@pytest.mark.parametrize("family", ["bert", "t5"])
def test_the_twin_has_the_architecture_and_vocabulary_and_fresh_weights_of_its_seed(family, tiny_model, tmp_path):
    like = tiny_model if family == "bert" else save_tiny_t5(tmp_path / "t5")
    config_class = BertConfig if family == "bert" else T5Config
    twins = [save_random_weights(like, tmp_path / f"twin{i}", seed) for i, seed in enumerate((3, 3, 4))]
    for twin in twins:
        assert config_class.load(twin).vocab_size == config_class.load(like).vocab_size
        text = "the cat sat on the mat"
        assert Tokenizer.from_pretrained(twin).encode(text) == Tokenizer.from_pretrained(like).encode(text)
        assert not (tmp_path / f"{twin.name}.partial").exists()
    assert same(weights(twins[0]), weights(twins[1]))  # the seed decides the weights
    assert not same(weights(twins[0]), weights(twins[2]))
    original = weights(like)
    shared = [k for k in weights(twins[0]) if k in original and original[k].shape == weights(twins[0])[k].shape]
    assert shared and not all((original[k] == weights(twins[0])[k]).all() for k in shared)


def test_a_family_without_a_random_twin_is_a_one_line_error(tmp_path):
    vectors = save_tiny_vectors(tmp_path / "vectors", ["a", "b"])
    with pytest.raises(UserError, match="random weights of a static model are not built"):
        save_random_weights(vectors, tmp_path / "twin", 0)
