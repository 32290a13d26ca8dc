"""Claim 1: contextual vectors separate senses that static vectors merge.

A static vector (word2vec, GloVe) is one per word type: "bank" by a river and "bank" that
lends money get the same numbers. CoVe (McCann et al. 2017), ELMo (Peters et al. 2018) and
BERT give a vector per occurrence. The WiC paper (Pilehvar and Camacho-Collados 2019) measured
what that buys: on its dev set a context-free baseline sits at chance (50.0), ELMo reaches
57.7 and BERT-large 65.5 (1B Word Benchmark and 3.3B words of pre-training). The downstream
side (CoVe's Table 4, ELMo's Table 1, BERT's Table 7): the same task model over contextual
features beats it over GloVe on SST-2 and CoNLL-2003 NER.

Here, every model is trained on the shared corpus (the books + WikiText-2) except CoVe's
translation model (Multi30k, over GloVe trained on the shared corpus) and all-MiniLM-L6-v2
(real pre-training at scale, the anchor; `--model` puts another model pre-trained elsewhere in its place):

- WiC dev accuracy of a logistic regression on the target word's vectors (`bertology wic`),
  for every layer: word2vec and GloVe (static), CoVe ([GloVe; CoVe] and each half), ELMo
  (token layer, LSTM 1, LSTM 2, mean), BERT pre-trained here and MiniLM (each layer). The
  regression is deterministic: one number per layer, no seeds.
- The same head over each kind of feature, over the seeds: SST-2 (mean-pooled, linear head)
  and CoNLL-2003 (a word's vector, the BERT paper's two-layer BiLSTM head); ELMo's layers by
  its learned scalar mix, BERT's as the sum of the last four. ELMo also as its paper uses it,
  beside the task model's own word vectors ([word2vec; ELMo]: `finetune --vectors`), the
  comparison its Table 1 makes (a baseline with and without ELMo).
- The "bank" view (`bertology explain senses`): MiniLM's last layer against word2vec.

Full scale, estimated on this 2-core machine: word2vec 3 minutes, GloVe 5, CoVe's translation
model 17 (1.5 epochs of Multi30k at `small`), ELMo 15 (`mini`, 2,500 steps of 32 x 20
tokens), the shared mini BERT 20 (if no claim has made it yet), the WiC probes 5, the 36
feature-head runs about 35: about 100 minutes from a cold cache, 60 with the BERT cached.
"""

from __future__ import annotations

from ..plots import plot_seed_bars
from ..uses.explain import explain_senses
from ..uses.wic import WicConfig, run_wic
from .experiment import ClaimReport, Experiment, seed_values, slug, verdict

WORD2VEC = {"method": "word2vec", "skip_gram": True, "vector_size": 300, "epochs": 3, "seed": 0}
GLOVE = {"method": "glove", "vector_size": 300, "epochs": 5, "seed": 0}
COVE = {"preset": "small", "epochs": 1.5, "seed": 0}
ELMO = {"arch": "elmo", "preset": "mini", "tokenizer": None, "vocab_size": 8000, "max_seq_len": 20, "batch_size": 32,
        "lr": 3e-3, "max_steps": 2500, "seed": 0}
QUICK_STATIC = {"vector_size": 50, "epochs": 1, "min_count": 2}
QUICK_COVE = {"preset": "tiny", "epochs": 1, "max_train_examples": 300}
# The heads: SST-2 as CoVe's and ELMo's sentence classifiers read it at its simplest (mean-pooled,
# linear), CoNLL-2003 through the BERT paper's feature-based BiLSTM; the settings of
# bench/static_features.py.
TASKS = {"SST-2": {"task": "sst2", "data": "glue/SST-2", "feature_head": "linear", "epochs": 10, "metric": "accuracy"},
         "CoNLL-2003": {"task": "conll2003", "data": "conll2003", "feature_head": "bilstm", "epochs": 3,
                        "metric": "f1"}}
TRAIN_EXAMPLES, QUICK_TRAIN_EXAMPLES = 2000, 64
FEATURE_HEAD_LR = 1e-3  # the heads over frozen features (bench/static_features.py's rate)
# The views of a word that see no context: a contextual model's best layer is chosen among the others.
CONTEXT_FREE = ("static", "GloVe (context-free)", "token layer", "embeddings")
WORD2VEC_ELMO = "[word2vec; ELMo]"


def run(experiment: Experiment) -> ClaimReport:
    """Train the feature sources, probe WiC, train the same heads over each; the tables and verdicts."""
    quick = experiment.quick
    word2vec = experiment.static_vectors(**{**WORD2VEC, **(QUICK_STATIC if quick else {})})
    glove = experiment.static_vectors(**{**GLOVE, **(QUICK_STATIC if quick else {})})
    cove = experiment.translation_model(vectors=str(glove), **{**COVE, **(QUICK_COVE if quick else {})})
    elmo = experiment.pretrained(**experiment.quick_scale(ELMO))
    reference, reference_name = experiment.reference, experiment.reference_name  # all-MiniLM-L6-v2 or --model
    sources = {"word2vec": word2vec, "GloVe": glove, "CoVe": cove, "ELMo": elmo,
               "BERT pre-trained here": experiment.shared_mlm(), reference_name: reference}
    # name -> the settings of its heads; [word2vec; ELMo] is ELMo with word2vec in front ([x_k; ELMo_k])
    head_sources = {}
    for name, model in sources.items():
        head_sources[name] = {"model": str(model)}
        if name == "ELMo":
            head_sources[WORD2VEC_ELMO] = {"model": str(elmo), "vectors": str(word2vec)}

    wic_rows, best_wic = [], {}
    wic_data = str(experiment.task_data("wic"))
    for name, model in sources.items():
        probe = run_wic(WicConfig(data=wic_data, model=str(model),
                                  out=str(experiment.out / "wic" / f"{slug(name)}.json"), device=experiment.device))
        for layer in probe["layers"]:
            wic_rows.append({"features": name, "layer": layer["layer"], "WiC dev accuracy": layer["dev_accuracy"]})
        best_wic[name] = max(layer["dev_accuracy"] for layer in probe["layers"] if layer["layer"] not in CONTEXT_FREE
                             or name in ("word2vec", "GloVe"))

    head_rows, groups = [], {}
    for task_name, task in TASKS.items():
        groups[task_name] = {}
        for name, source in head_sources.items():
            summary = experiment.finetuned(
                f"{task['task']}-{slug(name)}", **source, task=task["task"],
                data=str(experiment.task_data(task["data"])), mode="features", feature_head=task["feature_head"],
                feature_layers="mix" if name in ("ELMo", WORD2VEC_ELMO) else "sum_last_four", epochs=task["epochs"],
                lr=FEATURE_HEAD_LR, max_train_examples=QUICK_TRAIN_EXAMPLES if quick else TRAIN_EXAMPLES)
            groups[task_name][name] = seed_values(summary, task["metric"])
    for name in head_sources:
        head_rows.append({"features": name, **{f"{task} ({TASKS[task]['metric']})": groups[task][name]
                                               for task in TASKS}})

    plots = [str(plot_seed_bars(groups, experiment.out / "same_head.png", ylabel="dev score (SST-2 accuracy, "
                                "CoNLL-2003 entity F1)", title="The same head over static and contextual features"))]
    bank = explain_senses(reference, "bank", experiment.out / "bank.png", static=word2vec, model_name=reference_name)
    plots.append(str(experiment.out / "bank.png"))

    static_best = max(best_wic["word2vec"], best_wic["GloVe"])
    verdicts = [verdict(f"{name}'s best contextual layer beats static vectors on WiC", name, [best_wic[name]], "best static",
                        [static_best], "WiC dev accuracy") for name in ("CoVe", "ELMo", "BERT pre-trained here",
                                                                        reference_name)]
    for task_name in TASKS:
        metric = TASKS[task_name]["metric"]
        verdicts += [verdict(f"{name} features beat word2vec on {task_name}", name, groups[task_name][name],
                             "word2vec", groups[task_name]["word2vec"], metric)
                     for name in ("ELMo", "BERT pre-trained here", reference_name)]
        verdicts.append(verdict(f"[GloVe; CoVe] beats GloVe alone on {task_name}", "CoVe", groups[task_name]["CoVe"],
                                "GloVe", groups[task_name]["GloVe"], metric))
        verdicts.append(verdict(f"{WORD2VEC_ELMO} beats word2vec alone on {task_name} (ELMo's Table 1: a baseline "
                                "with and without ELMo)", WORD2VEC_ELMO, groups[task_name][WORD2VEC_ELMO], "word2vec",
                                groups[task_name]["word2vec"], metric))
    notes = ["WiC: the dev set is balanced (chance 0.500); one number per layer (a deterministic regression), so "
             "the WiC verdicts compare single values.",
             f"The bank view ({reference_name}, last layer): cosine within sense {bank.contextual.within:.2f} vs "
             f"across {bank.contextual.across:.2f}; word2vec gives 'bank' one vector in every sentence."]
    train_count = QUICK_TRAIN_EXAMPLES if quick else TRAIN_EXAMPLES
    return ClaimReport(
        name="contextual-vs-static", title="Claim 1: contextual vectors separate senses that static vectors merge",
        paper="WiC dev: chance 50.0, context-free baselines at chance, ELMo 57.7, BERT-large 65.5; the same task "
              "model over CoVe / ELMo / BERT features beats it over GloVe (CoVe: +0.6-3 points with 7M translation "
              "pairs; ELMo: SST-5 +3.3, NER +2.1 F1 with the 1B Word Benchmark).",
        scale=experiment.scale_note() + (f" word2vec (skip-gram) and GloVe {WORD2VEC['vector_size']}-d on the same "
              f"corpus; CoVe's translation model at `{COVE['preset']}` for {COVE['epochs']} epochs of Multi30k "
              f"(29k captions); ELMo `{ELMO['preset']}` for {ELMO['max_steps']:,} steps of {ELMO['batch_size']} x "
              f"{ELMO['max_seq_len']} tokens. Heads: {train_count:,} training examples per task, full dev sets."
              if not quick else "")
              + ("" if experiment.reference_is_minilm else f" Pre-trained elsewhere: {experiment.reference_words()}."),
        columns=["features", "layer", "WiC dev accuracy", *(f"{task} ({TASKS[task]['metric']})" for task in TASKS)],
        rows=wic_rows + [{**row, "layer": "head over the features"} for row in head_rows], verdicts=verdicts,
        plots=plots, notes=notes)

