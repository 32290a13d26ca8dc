"""RoBERTa, ALBERT, ELECTRA and DistilBERT: BERT's encoder in transformers' layouts (models/bert.py's
`BertLayout`, each family's key table), against transformers' own classes on the same random weights.

Every class of the four families that transformers has: a directory transformers saved loads here
(the class its config.json names) and gives transformers' outputs on a right-padded batch, losses
included; what bertology saves loads in transformers with every key and no other, and back here
bit for bit. Then the layouts' own invariances and their config files."""

import json

import pytest
import torch
import transformers

from bertology.errors import UserError
from bertology.inference.modeldir import load_model, open_model_dir
from bertology.models import family_of
from bertology.models.albert import AlbertConfig
from bertology.models.base import evenly_spaced_layers
from bertology.models.bert import keep_layers
from bertology.models.distilbert import DistilBertConfig
from bertology.models.electra import ElectraConfig
from bertology.models.roberta import RobertaConfig, RobertaModel
from bertology.ops import IGNORE_INDEX

TOL = 1e-5
PREFIX = {"roberta": "Roberta", "albert": "Albert", "electra": "Electra", "distilbert": "DistilBert"}
# Each family's classes in transformers: (class suffix, num_labels, the output fields compared).
CLASSES = [("Model", None, ("last_hidden_state", "pooler_output")), ("ForMaskedLM", None, ("logits",)),
           ("ForPreTraining", None, ("logits", "prediction_logits", "sop_logits")),
           ("ForSequenceClassification", 3, ("logits",)), ("ForSequenceClassification", 1, ("logits",)),
           ("ForTokenClassification", 4, ("logits",)), ("ForQuestionAnswering", None, ("start_logits", "end_logits"))]
CASES = [(model_type, *case) for model_type in PREFIX for case in CLASSES
         if hasattr(transformers, PREFIX[model_type] + case[0])]


def reference_config(model_type: str, **extra) -> transformers.PretrainedConfig:
    """A tiny config of transformers' class: 2 layers, 32 wide, factorized (16) where the family has it."""
    if model_type == "distilbert":
        sizes = dict(dim=32, n_layers=2, n_heads=4, hidden_dim=48)
    else:
        sizes = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)
    if model_type in ("albert", "electra"):
        sizes["embedding_size"] = 16
    return transformers.AutoConfig.for_model(model_type, **{"vocab_size": 99, "max_position_embeddings": 40, **sizes,
                                                            **extra})


def reference(model_type: str, suffix: str, seed: int = 0, **extra) -> torch.nn.Module:
    """transformers' model with every tensor random (LayerNorms and biases too), std 0.3."""
    torch.manual_seed(seed)
    model = getattr(transformers, PREFIX[model_type] + suffix)(reference_config(model_type, **extra)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    return model


def padded_batch(pad_id: int, seed: int = 1) -> dict[str, torch.Tensor]:
    """Three rows of 14, 9 and 3 tokens, right-padded with `pad_id`, segments 0 then 1."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 99, (3, 14), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 9:], mask[2, 3:] = 0, 0
    ids[mask == 0] = pad_id
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types * mask}


def labels_for(suffix: str, num_labels: int | None, batch: dict) -> dict[str, torch.Tensor]:
    """Gold outputs for the class's loss."""
    generator = torch.Generator().manual_seed(2)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    if suffix == "ForQuestionAnswering":
        return {"start_positions": torch.tensor([1, 4, 0]), "end_positions": torch.tensor([3, 8, 2])}
    if suffix == "ForSequenceClassification":
        return {"labels": torch.rand(3, generator=generator) if num_labels == 1
                else torch.randint(0, num_labels, (3,), generator=generator)}
    if suffix == "ForTokenClassification":
        return {"labels": torch.randint(0, num_labels, ids.shape, generator=generator).masked_fill(mask == 0, IGNORE_INDEX)}
    if suffix == "ForMaskedLM":
        labels = torch.full_like(ids, IGNORE_INDEX)
        labels[:, 1] = ids[:, 1]
        return {"labels": labels}
    return {}


def outputs(model, batch: dict, model_type: str, **labels):
    """transformers' or bertology's model on the batch (segments for the families that have them)."""
    inputs = dict(batch) if model_type in ("albert", "electra") else {k: batch[k] for k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        return model(**inputs, **labels)


def field_of(output, name: str) -> torch.Tensor | None:
    """An output field under transformers' name (ours calls ALBERT's sentence-order logits BERT's name)."""
    if name == "sop_logits" and not hasattr(output, name):
        name = "seq_relationship_logits"
    if name == "logits" and getattr(output, "prediction_logits", None) is not None:
        return None  # a pre-training model: its masked LM is compared as prediction_logits
    return getattr(output, name, None)


def assert_close_on_real_positions(theirs, ours, fields, mask):
    """Each field the two outputs have equal within TOL at the real positions (all of a row's outputs)."""
    compared = 0
    for field in fields:
        expected, got = field_of(theirs, field), field_of(ours, field)
        assert (expected is None) == (got is None), field
        if expected is None:
            continue
        real = mask.bool() if expected.dim() >= 2 and expected.shape[:2] == mask.shape else slice(None)
        assert expected.abs().mean() > 100 * TOL, field  # not a near-zero output that anything would match
        torch.testing.assert_close(got[real], expected[real], rtol=0, atol=TOL, msg=field)
        compared += 1
    assert compared


@pytest.mark.slow
@pytest.mark.parametrize("model_type, suffix, num_labels, fields", CASES)
def test_transformers_directories_load_give_its_outputs_and_round_trip(model_type, suffix, num_labels, fields, tmp_path):
    theirs = reference(model_type, suffix, **({"num_labels": num_labels} if num_labels else {}))
    theirs.save_pretrained(tmp_path / "theirs")
    ours = load_model(tmp_path / "theirs")
    assert type(ours).__name__ == type(theirs).__name__ and family_of(tmp_path / "theirs").name == model_type
    assert not getattr(ours, "newly_initialized", [])
    batch = padded_batch(theirs.config.pad_token_id)
    assert_close_on_real_positions(outputs(theirs, batch, model_type), outputs(ours, batch, model_type), fields,
                                   batch["attention_mask"])
    labels = labels_for(suffix, num_labels, batch)
    if labels:
        expected, got = outputs(theirs, batch, model_type, **labels).loss, outputs(ours, batch, model_type, **labels).loss
        assert abs(expected.item() - got.item()) < TOL
    # bertology -> transformers -> bertology: every key, nothing else, and the same tensors bit for bit.
    ours.save_pretrained(tmp_path / "ours")
    again, info = type(theirs).from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not any(info.values()), info
    assert_close_on_real_positions(outputs(theirs, batch, model_type), outputs(again.eval(), batch, model_type),
                                   fields, batch["attention_mask"])
    again.save_pretrained(tmp_path / "again")
    back = load_model(tmp_path / "again")
    assert type(back) is type(ours)
    for (name, a), b in zip(ours.state_dict().items(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["roberta", "albert", "electra", "distilbert"])
def test_an_untied_output_matrix_and_its_bias_load_and_save(model_type, tmp_path):
    theirs = reference(model_type, "ForMaskedLM", tie_word_embeddings=False)
    theirs.save_pretrained(tmp_path / "theirs")
    ours = load_model(tmp_path / "theirs")
    assert ours.mlm.decoder is not None and not ours.config.tie_word_embeddings
    batch = padded_batch(theirs.config.pad_token_id)
    assert_close_on_real_positions(outputs(theirs, batch, model_type), outputs(ours, batch, model_type), ("logits",),
                                   batch["attention_mask"])
    ours.save_pretrained(tmp_path / "ours")
    again, info = type(theirs).from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not any(info.values()), info
    torch.testing.assert_close(outputs(again.eval(), batch, model_type).logits, outputs(theirs, batch, model_type).logits,
                               rtol=0, atol=TOL)


@pytest.mark.slow
def test_roberta_positions_count_real_tokens_so_left_padding_changes_nothing():
    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                       intermediate_size=48, max_position_embeddings=20)).eval()
    ids = torch.randint(3, 99, (1, 18))
    padded = torch.cat([torch.ones(1, 5, dtype=torch.long), ids[:, :13]], dim=1)  # pad_token_id 1 on the left
    mask = (padded != 1).long()
    with torch.no_grad():
        alone, left = model(ids[:, :13]).last_hidden_state, model(padded, mask).last_hidden_state
        torch.testing.assert_close(left[0, 5:], alone[0], rtol=0, atol=TOL)
        model(ids)  # 18 tokens: the most its 20 rows hold after the pad_token_id + 1 offset
        with pytest.raises(UserError, match="exceeds the model's 18 positions"):
            model(torch.randint(3, 99, (1, 19)))


@pytest.mark.parametrize("model_type", ["roberta", "albert", "electra", "distilbert"])
def test_config_json_is_transformers_and_reads_back(model_type, tmp_path):
    theirs = reference_config(model_type, num_labels=3)
    theirs.save_pretrained(tmp_path)
    open_model_dir(tmp_path).config.save(tmp_path)  # read by bertology, written back
    written = json.loads((tmp_path / "config.json").read_text())
    again = transformers.AutoConfig.from_pretrained(tmp_path)
    for key, value in theirs.to_diff_dict().items():
        if key not in ("transformers_version", "architectures", "dtype"):
            assert getattr(again, key) == value, key
    assert not {"share_layers", "pre_layer_norm", "causal", "head_bilstm"} & set(written)
    if model_type == "distilbert":
        assert {"dim", "n_layers", "hidden_dim"} <= set(written) and "hidden_size" not in written


@pytest.mark.parametrize("build, message", [
    (lambda: RobertaConfig(pre_layer_norm=True), "has no pre-LayerNorm"),
    (lambda: ElectraConfig(share_layers=True), "has no shared layers"),
    (lambda: DistilBertConfig(type_vocab_size=2), "no segment embeddings"),
    (lambda: AlbertConfig.from_dict({"num_hidden_groups": 2, "num_hidden_layers": 4}), "num_hidden_groups 2"),
    (lambda: AlbertConfig.from_dict({"inner_group_num": 2}), "inner_group_num 2"),
    (lambda: DistilBertConfig.from_dict({"dim": 64, "hidden_size": 64, "n_heads": 2}), "both 'hidden_size' and 'dim'"),
])
def test_what_transformers_layouts_cannot_hold_is_a_one_line_error(build, message):
    with pytest.raises(UserError, match=message) as error:
        build()
    assert "\n" not in str(error.value)


@pytest.mark.slow
def test_albert_shares_one_layer_or_keeps_one_per_group(tmp_path):
    for groups, distinct in ((1, 1), (3, 3)):
        reference_model = transformers.AlbertModel(reference_config("albert", num_hidden_layers=3, num_hidden_groups=groups))
        reference_model.save_pretrained(tmp_path / str(groups))
        ours = load_model(tmp_path / str(groups))
        assert ours.config.share_layers == (groups == 1) and len(ours.layers) == distinct


@pytest.mark.slow
def test_a_roberta_cut_to_fewer_layers_loads_in_transformers(tmp_path):
    theirs = reference("roberta", "ForSequenceClassification", num_labels=2)
    theirs.save_pretrained(tmp_path / "theirs")
    student = keep_layers(load_model(tmp_path / "theirs"), evenly_spaced_layers(1, 2))
    student.save_pretrained(tmp_path / "student")
    again, info = transformers.RobertaForSequenceClassification.from_pretrained(tmp_path / "student",
                                                                                 output_loading_info=True)
    assert again.config.num_hidden_layers == 1 and not any(info.values())
    batch = padded_batch(1)
    torch.testing.assert_close(outputs(again.eval(), batch, "roberta").logits, outputs(student, batch, "roberta").logits,
                               rtol=0, atol=TOL)
