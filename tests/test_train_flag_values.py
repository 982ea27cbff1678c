"""Each flag `aiayn train` accepts, by its effect on a value: a row of the prepared data, a field of the model's
config or generation config, a collator's setting, a training argument, a metric or a file. Each case is built so
that the flag's value and the default give different values (the default's value is checked too), and each flag is
checked in both of argparse's spellings (`--a_b` and `--a-b`) and under the example scripts' names."""

import json
import random

import numpy as np
import pytest
import torch
import transformers
from task_files import TOPICS, write_classification_csv, write_entities, write_squad, write_swag

from aiayn import training
from aiayn.training import parse, prepare

COMMON = ["--report_to", "none", "--vocab_size", "120", "--dataloader_pin_memory", "false", "--save_strategy", "no"]


def write_pairs(path, rows: int = 40, seed: int = 5):
    """Two text columns and two label columns (`label`: the first text's topic; `kind`: a second labelling)."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        f.write("premise,hypothesis,label,kind\n")
        for i in range(rows):
            topic = list(TOPICS)[i % 3]
            words = TOPICS[topic].split()
            f.write(f"{rng.choice(words)} {rng.choice(words)},{rng.choice(words)},{topic},k{i % 2}\n")


def write_long_summaries(path, rows: int = 30, seed: int = 6):
    """Documents of 14 words and summaries of 10: longer than the length flags below, so that each limit shows."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        f.write("article,highlights\n")
        for _ in range(rows):
            topic = rng.choice(list(TOPICS))
            words = TOPICS[topic].split()
            document = " ".join(rng.choice(words) for _ in range(14))
            f.write(f"{document},{' '.join(rng.choice(words) for _ in range(10))}\n")


def write_translations(path, rows: int = 40, seed: int = 7):
    """English-German pairs whose length grows with the row (2 to 11 words a side)."""
    rng = random.Random(seed)
    english = ["the", "cat", "dog", "sees", "a", "house", "big", "small"]
    german = ["die", "Katze", "Hund", "sieht", "ein", "Haus", "gross", "klein"]
    with open(path, "w") as f:
        for i in range(rows):
            count = 2 + i % 10
            indices = [rng.randrange(len(english)) for _ in range(count)]
            pair = {"en": " ".join(english[k] for k in indices), "de": " ".join(german[k] for k in indices)}
            f.write(json.dumps({"translation": pair}) + "\n")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flag_values")
    write_classification_csv(folder / "topics.csv")
    write_pairs(folder / "pairs.csv")
    write_entities(folder / "entities.jsonl", 40)
    entities = [json.loads(line) for line in (folder / "entities.jsonl").read_text().splitlines()]
    (folder / "words.jsonl").write_text("".join(
        json.dumps({"words": e["tokens"], "tags": ["X"] * len(e["tokens"]), "ner": e["ner_tags"]}) + "\n"
        for e in entities
    ))  # fmt: skip
    write_squad(folder / "squad.json", 30)
    write_swag(folder / "swag.jsonl", 30)
    swag = [json.loads(line) for line in (folder / "swag.jsonl").read_text().splitlines()]
    (folder / "swag-renamed.jsonl").write_text("".join(
        json.dumps({**{k: v for k, v in row.items() if k not in ("sent1", "sent2")}, "premise": row["sent1"],
                    "start": "meanwhile"}) + "\n" for row in swag
    ))  # fmt: skip
    write_long_summaries(folder / "summaries.csv")
    write_translations(folder / "pairs.jsonl")
    (folder / "lines.txt").write_text("".join(f"{TOPICS[t]} line {i}\n" for i in range(40) for t in TOPICS))
    return folder


def prepared(task: str, argv: list[str], tmp_path, monkeypatch=None):
    model_args, data_args, training_args, recipe = parse(task, [*COMMON, *argv, "--output_dir", str(tmp_path / "out")])
    trainer, corpus, dataset, data_args = prepare(task, model_args, data_args, training_args, recipe)
    return trainer, corpus, dataset, data_args


def lengths(split, column: str = "input_ids") -> list[int]:
    return sorted({len(ids) for ids in split[column]})


def first_text(trainer, dataset, split: str = "train", column: str = "input_ids") -> str:
    ids = [token for token in dataset[split][0][column] if token >= 0]
    return trainer.processing_class.decode(ids, skip_special_tokens=True)


# (case id, task, data flags, flags under test, what to read, its value with the flags, its value without them)
CASES = [
    ("max_seq_length", "classification", ["--train_file", "topics.csv"], ["--max_seq_length", "12"],
     lambda t, c, d: lengths(d["train"]), [12], [128]),
    ("block_size-spelling", "classification", ["--train_file", "topics.csv"], ["--block_size", "12"],
     lambda t, c, d: lengths(d["train"]), [12], [128]),
    ("pad_to_max_length", "classification", ["--train_file", "topics.csv", "--max_seq_length", "40"],
     ["--pad_to_max_length", "false"], lambda t, c, d: len(lengths(d["train"])) > 1, True, False),
    ("max_train_samples", "classification", ["--train_file", "topics.csv"], ["--max_train_samples", "30"],
     lambda t, c, d: len(d["train"]), 30, 285),
    ("max_eval_samples", "classification", ["--train_file", "topics.csv"], ["--max_eval_samples", "6"],
     lambda t, c, d: len(d["validation"]), 6, 15),
    ("validation_split_percentage", "classification", ["--train_file", "topics.csv"],
     ["--validation_split_percentage", "20"], lambda t, c, d: len(d["validation"]), 60, 15),
    ("max_predict_samples", "classification", ["--train_file", "topics.csv", "--test_file", "topics.csv"],
     ["--max_predict_samples", "4"], lambda t, c, d: len(d["test"]), 4, 300),
    ("label_column_name", "classification", ["--train_file", "pairs.csv", "--text_column_names", "premise"],
     ["--label_column_name", "kind"], lambda t, c, d: sorted(t.model.config.label2id), ["k0", "k1"],
     sorted(TOPICS)),
    ("text_column_delimiter", "classification", ["--train_file", "pairs.csv", "--text_column_names",
     "premise,hypothesis"], ["--text_column_delimiter", " | "], lambda t, c, d: first_text(t, d).count("|"), 1, 0),
    ("text_column_names", "classification", ["--train_file", "pairs.csv"], ["--text_column_names", "hypothesis"],
     lambda t, c, d: len(first_text(t, d).split()), 1, None),
    ("vocab_size", "classification", ["--train_file", "topics.csv"], ["--vocab_size", "90"],
     lambda t, c, d: t.model.config.vocab_size, 90, 120),
    ("config_overrides", "classification", ["--train_file", "topics.csv"], ["--config_overrides",
     "d_model=48,num_layers=1"], lambda t, c, d: (t.model.config.d_model, t.model.config.num_layers), (48, 1),
     (64, 2)),
    ("preset", "classification", ["--train_file", "topics.csv"], ["--preset", "tiny-decoder"],
     lambda t, c, d: type(t.model).__name__, "AiaynDecoderForSequenceClassification",
     "AiaynEncoderForSequenceClassification"),
    ("attn_implementation", "classification", ["--train_file", "topics.csv"], ["--attn_implementation", "eager"],
     lambda t, c, d: t.model.config._attn_implementation, "eager", "sdpa"),
    ("paper_recipe", "classification", ["--train_file", "topics.csv"], ["--paper_recipe"],
     lambda t, c, d: (t.args.lr_scheduler_type, t.args.warmup_steps, t.args.label_smoothing_factor,
                      t.args.adam_beta2), ("inverse_sqrt", 4000, 0.1, 0.98), ("inverse_sqrt", 0.1, 0.0, 0.98)),
    ("learning_rate", "classification", ["--train_file", "topics.csv"], ["--learning_rate", "0.001"],
     lambda t, c, d: (round(t.args.learning_rate, 12), t.args.lr_scheduler_type, t.args.adam_beta2),
     (0.001, "linear", 0.999), (round(64**-0.5 * 4000**-0.5, 12), "inverse_sqrt", 0.98)),
    ("paper_recipe-warmup_steps", "classification", ["--train_file", "topics.csv", "--paper_recipe"],
     ["--warmup_steps", "50"], lambda t, c, d: (t.args.warmup_steps, round(t.args.learning_rate, 9)),
     (50, round(64**-0.5 * 50**-0.5, 9)), (4000, round(64**-0.5 * 4000**-0.5, 9))),
    ("label_column_name-tags", "token-classification", ["--train_file", "words.jsonl", "--text_column_name",
     "words"], ["--label_column_name", "ner"], lambda t, c, d: sorted(t.model.config.label2id),
     ["B-LOC", "B-PER", "I-LOC", "O"], ["X"]),
    ("label_all_tokens", "token-classification", ["--train_file", "entities.jsonl"], ["--label_all_tokens"],
     lambda t, c, d: sum(label != -100 for labels in d["train"]["labels"] for label in labels)
     > sum(len(words) for words in c["train"]["tokens"]), True, False),
    ("version_2_with_negative", "question-answering", ["--train_file", "squad.json", "--max_seq_length", "64",
     "--doc_stride", "8"], ["--version_2_with_negative"], lambda t, c, d: "best_f1" in str(t.compute_metrics(
         transformers.EvalPrediction(predictions=(np.zeros((len(d["validation"]), 64)),) * 2, label_ids=None))),
     True, False),
    ("context_column_name", "multiple-choice", ["--train_file", "swag-renamed.jsonl", "--question_column_name",
     "start"], ["--context_column_name", "premise"],
     lambda t, c, d: (CAPTURED["context_column"], first_text_choice(t, d).startswith(c["train"][0]["premise"][:10])),
     ("premise", True), None),
    ("question_column_name", "multiple-choice", ["--train_file", "swag-renamed.jsonl", "--context_column_name",
     "premise"], ["--question_column_name", "start"], lambda t, c, d: "meanwhile" in first_text_choice(t, d), True,
     None),
    ("max_source_length", "summarization", ["--train_file", "summaries.csv"], ["--max_source_length", "6"],
     lambda t, c, d: max(lengths(d["train"])), 6, None),
    ("max_target_length", "summarization", ["--train_file", "summaries.csv"], ["--max_target_length", "4"],
     lambda t, c, d: (max(lengths(d["train"], "labels")), max(lengths(d["validation"], "labels")),
                      t.model.generation_config.max_length), (4, 4, 4), None),
    ("val_max_target_length", "summarization", ["--train_file", "summaries.csv", "--max_target_length", "4"],
     ["--val_max_target_length", "7"], lambda t, c, d: (max(lengths(d["train"], "labels")),
                                                       max(lengths(d["validation"], "labels")),
                                                       t.model.generation_config.max_length), (4, 7, 7), (4, 4, 4)),
    ("num_beams", "summarization", ["--train_file", "summaries.csv"], ["--num_beams", "3"],
     lambda t, c, d: (t.model.generation_config.num_beams, t.args.generation_num_beams), (3, 3), (1, 1)),
    ("source_prefix", "summarization", ["--train_file", "summaries.csv"], ["--source_prefix", "sum up "],
     lambda t, c, d: (getattr(t.model.config, "prefix", None), first_text(t, d).startswith("sum up ")),
     ("sum up ", True), (None, False)),
    ("ignore_pad_token_for_loss", "summarization", ["--train_file", "summaries.csv", "--pad_to_max_length",
     "--max_target_length", "60"], ["--ignore_pad_token_for_loss", "false"],
     lambda t, c, d: d["train"][0]["labels"][-1] == t.processing_class.pad_token_id, True, False),
    ("text_column-summary_column", "summarization", ["--train_file", "summaries.csv"],
     ["--text_column", "highlights", "--summary_column", "article"],
     lambda t, c, d: len(first_text(t, d, "train", "labels").split()), 14, 10),
    ("source_lang-target_lang", "translation", ["--train_file", "pairs.jsonl"],
     ["--source_lang", "de", "--target_lang", "en"], lambda t, c, d: first_text(t, d) == c["train"][0][
         "translation"]["de"], True, False),
    ("max_pair_tokens", "translation", ["--train_file", "pairs.jsonl"], ["--max_pair_tokens", "6"],
     lambda t, c, d: (len(d["train"]) == pairs_within(6), max(lengths(d["train"]))), (True, 6), (False, 12)),
    ("max_pair_tokens-padded", "translation", ["--train_file", "pairs.jsonl", "--pad_to_max_length",
     "--max_source_length", "20", "--max_target_length", "20"], ["--max_pair_tokens", "6"],
     lambda t, c, d: len(d["train"]) == pairs_within(6), True, False),
    ("val_max_target_length-translation", "translation", ["--train_file", "pairs.jsonl", "--max_target_length", "4",
     "--preset", "transformer-base", "--config_overrides", "d_model=32,d_ff=64,num_heads=2,num_layers=1"],
     ["--val_max_target_length", "9"], lambda t, c, d: (max(lengths(d["train"], "labels")),
                                                       max(lengths(d["validation"], "labels")),
                                                       t.args.generation_max_length), (4, 9, 9), (4, 4, None)),
    ("block_size", "causal-lm", ["--train_file", "lines.txt"], ["--block_size", "16"],
     lambda t, c, d: lengths(d["train"]), [16], None),
    ("keep_linebreaks", "causal-lm", ["--train_file", "lines.txt", "--block_size", "16"],
     ["--keep_linebreaks", "false"], lambda t, c, d: c["train"][0]["text"].endswith("\n"), False, True),
    ("dataset_name", "causal-lm", ["--block_size", "16"], ["--dataset_name", "pydoc"],
     lambda t, c, d: "topic" in c["train"].column_names, True, False),
    ("mlm_probability", "masked-lm", ["--dataset_name", "pydoc", "--max_seq_length", "16"],
     ["--mlm_probability", "0.4"], lambda t, c, d: t.data_collator.collator.mlm_probability, 0.4, 0.15),
    ("noise_density-mean_noise_span_length", "span-corruption", ["--dataset_name", "pydoc", "--max_source_length",
     "32"], ["--noise_density", "0.3", "--mean_noise_span_length", "2"],
     lambda t, c, d: (t.data_collator.noise_density, t.data_collator.mean_span_length), (0.3, 2.0),
     (0.15, 3.0)),
    ("mask_ratio", "masked-image-modeling", ["--max_train_samples", "20", "--max_eval_samples", "10"],
     ["--mask_ratio", "0.25"], lambda t, c, d: t.data_collator.mask_ratio, 0.25, 0.5),
]  # fmt: skip


def pairs_within(limit: int) -> int:
    """The pairs of the translation file whose both sides are at most `limit` tokens long (with `</s>`), counted
    with the tokenizer the run trained; `limit - 1` must give fewer, so that the boundary counts."""
    tokenizer, pairs = CAPTURED["tokenizer"], CAPTURED["pairs"]

    def count(bound: int) -> int:
        return sum(len(tokenizer(pair["en"])["input_ids"]) <= bound
                   and len(tokenizer(text_target=pair["de"])["input_ids"]) <= bound for pair in pairs)  # fmt: skip

    assert count(limit - 1) < count(limit) < len(pairs)
    return count(limit)


def first_text_choice(trainer, dataset) -> str:
    return trainer.processing_class.decode(dataset["train"][0]["input_ids"][0], skip_special_tokens=True)


CAPTURED: dict = {}


def run_case(task, data_flags, flags, files, tmp_path):
    argv = [part.replace("topics.csv", str(files / "topics.csv")) for part in data_flags + flags]
    argv = [str(files / part) if (files / part).is_file() else part for part in argv]
    trainer, corpus, dataset, data_args = prepared(task, argv, tmp_path)
    CAPTURED.clear()
    CAPTURED.update(vars(data_args), tokenizer=trainer.processing_class)
    if "translation" in corpus["train"].column_names:
        CAPTURED["pairs"] = corpus["train"]["translation"]
    return trainer, corpus, dataset


@pytest.mark.parametrize(("name", "task", "data_flags", "flags", "read", "expected", "default"), CASES,
                         ids=[case[0] for case in CASES])  # fmt: skip
def test_each_flag_sets_its_value_and_differs_from_the_default(name, task, data_flags, flags, read, expected, default,
                                                               files, tmp_path):  # fmt: skip
    assert read(*run_case(task, data_flags, flags, files, tmp_path)) == expected
    if default is not None:
        assert read(*run_case(task, data_flags, [], files, tmp_path / "default")) == default


def dashed(argv: list[str]) -> list[str]:
    return [arg.replace("_", "-") if arg.startswith("--") else arg for arg in argv]


@pytest.mark.parametrize(("name", "task", "data_flags", "flags"), [case[:4] for case in CASES],
                         ids=[case[0] for case in CASES])  # fmt: skip
def test_each_flag_means_the_same_in_both_spellings(name, task, data_flags, flags, tmp_path):
    argv = [*data_flags, *flags, "--output_dir", str(tmp_path)]
    underscored, with_dashes = parse(task, argv), parse(task, dashed(argv))
    for ours, theirs in zip(underscored[:3], with_dashes[:3], strict=True):
        assert fields(ours) == fields(theirs)
    assert underscored[3] == with_dashes[3]  # the recipe, which reads the flags given


def fields(arguments) -> dict:
    return arguments.to_dict() if hasattr(arguments, "to_dict") else vars(arguments)


def test_training_flags_of_transformers_4_answer_to_their_new_names(tmp_path):
    """`--evaluation_strategy`, `--no_cuda` and `--per_gpu_*` set transformers 5's fields; `--overwrite_output_dir` and
    `--save_safetensors` are accepted and change nothing; `--logging_dir` is refused with its reason."""
    old = ["--evaluation_strategy", "steps", "--no_cuda", "--per_gpu_train_batch_size", "3",
           "--per-gpu-eval-batch-size", "5", "--overwrite_output_dir", "--save_safetensors", "true"]  # fmt: skip
    new = ["--eval_strategy", "steps", "--use_cpu", "--per_device_train_batch_size", "3",
           "--per_device_eval_batch_size", "5"]  # fmt: skip
    base = ["--output_dir", str(tmp_path)]
    assert fields(parse("classification", base + old)[2]) == fields(parse("classification", base + new)[2])
    defaults = parse("classification", base)[2]
    assert (defaults.eval_strategy, defaults.use_cpu, defaults.per_device_train_batch_size) == ("no", False, 8)
    with pytest.raises(SystemExit):
        parse("classification", [*base, "--logging_dir", "logs"])


def test_label_smoothing_is_left_out_of_the_evaluation_loss(files, tmp_path):
    """With `--label_smoothing_factor 0.3` the evaluation's loss is the plain cross-entropy (the Trainer's own
    `evaluate` reports the smoothed one), and the smoother is back for training afterwards."""
    trainer, _, _, _ = prepared("classification", ["--train_file", str(files / "topics.csv"), "--max_seq_length", "12",
                                                   "--label_smoothing_factor", "0.3"], tmp_path)  # fmt: skip
    smoothed = trainer.evaluate()["eval_loss"]
    plain = training.evaluate(trainer)["eval_loss"]
    smoother, trainer.label_smoother = trainer.label_smoother, None
    assert plain == pytest.approx(trainer.evaluate()["eval_loss"], rel=1e-6)
    assert smoother is not None and trainer.label_smoother is None
    trainer.label_smoother = smoother
    assert abs(smoothed - plain) > 1e-3


def test_tokenizer_train_samples_trains_the_tokenizer_on_every_kth_example(files, tmp_path, monkeypatch):
    seen = []
    real = training.train_tokenizer

    def counting(family, texts, vocab_size):
        texts = list(texts)
        seen.append(len(texts))
        return real(family, texts, vocab_size)

    monkeypatch.setattr(training, "train_tokenizer", counting)
    prepared("classification", ["--train_file", str(files / "topics.csv"), "--tokenizer_train_samples", "50"],
             tmp_path)  # fmt: skip
    prepared("classification", ["--train_file", str(files / "topics.csv")], tmp_path / "all")
    assert seen == [48, 285]  # every 6th of 285 rows (ceil(285 / 50)), then all of them


def test_a_saved_models_flags_tokenizer_config_dtype_and_new_labels(files, tmp_path):
    """`--model_name_or_path` with `--tokenizer_name` (another folder's tokenizer), `--dtype` and, for a head of
    other labels, `--ignore_mismatched_sizes`; `--config_name` builds a new model of a saved config."""
    trainer, *_ = prepared("classification", ["--train_file", str(files / "topics.csv"), "--max_seq_length", "12"],
                           tmp_path)  # fmt: skip
    trainer.save_model(str(tmp_path / "saved"))
    other = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "saved"))
    other.add_tokens(["zzzword"])
    other.save_pretrained(str(tmp_path / "tokenizer"))
    loaded, *_ = prepared("classification", ["--train_file", str(files / "topics.csv"), "--model_name_or_path",
                                             str(tmp_path / "saved"), "--tokenizer_name", str(tmp_path / "tokenizer"),
                                             "--dtype", "bfloat16"], tmp_path / "loaded")  # fmt: skip
    assert len(loaded.processing_class) == 121 and loaded.model.dtype == torch.bfloat16
    pairs = ["--train_file", str(files / "pairs.csv"), "--text_column_names", "premise", "--label_column_name", "kind"]
    with pytest.raises(RuntimeError, match="classifier.out_proj.bias has shape .3,. in the checkpoint and .2,."):
        prepared("classification", [*pairs, "--model_name_or_path", str(tmp_path / "saved")], tmp_path / "mismatch")
    relabelled, *_ = prepared("classification", [*pairs, "--model_name_or_path", str(tmp_path / "saved"),
                                                 "--ignore_mismatched_sizes"], tmp_path / "relabelled")  # fmt: skip
    assert relabelled.model.config.num_labels == 2 and sorted(relabelled.model.config.label2id) == ["k0", "k1"]
    built, *_ = prepared("classification", ["--train_file", str(files / "topics.csv"), "--config_name",
                                            str(tmp_path / "saved"), "--config_overrides", "d_model=32"],
                         tmp_path / "config")  # fmt: skip
    assert built.model.config.d_model == 32 and built.model.config.num_layers == 2


def test_entity_level_metrics_add_each_types_scores(files, tmp_path):
    """`--return_entity_level_metrics`: the evaluation reports PER's and LOC's scores beside the overall ones (here
    of predictions that are the labels themselves: every score 1, each type's count its entities)."""
    reports = {}
    for name, flags in (("entities", ["--return_entity_level_metrics"]), ("overall", [])):
        trainer, corpus, dataset, _ = prepared("token-classification", ["--train_file", str(files / "entities.jsonl"),
                                                                        *flags], tmp_path / name)  # fmt: skip
        labels = np.array([row + [-100] * (64 - len(row)) for row in dataset["validation"]["labels"]])
        logits = np.eye(trainer.model.config.num_labels)[np.where(labels < 0, 0, labels)]
        reports[name] = trainer.compute_metrics(transformers.EvalPrediction(predictions=logits, label_ids=labels))
    people = sum(tag == "B-PER" for tags in corpus["validation"]["ner_tags"] for tag in tags)
    assert reports["overall"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "accuracy": 1.0}
    assert reports["entities"]["PER_f1"] == 1.0 and reports["entities"]["PER_number"] == people > 0
    assert set(reports["entities"]) == set(reports["overall"]) | {
        f"{kind}_{score}" for kind in ("LOC", "PER") for score in ("precision", "recall", "f1", "number")
    }


def test_the_answer_flags_pick_the_answer_written_to_eval_predictions(files, tmp_path):
    """On the question whose context ends "... lives in Kuala Lumpur.", logits that start at "in" (10) and end at
    "Kuala" (8) or "Lumpur" (9): the best span is "in Kuala Lumpur"; `--max_answer_length` one token short of it
    keeps "in Kuala"; `--n_best_size 1` keeps the best start and end alone; under v2 the null answer (-5 + -5
    against 19) is the answer only with `--null_score_diff_threshold` below -29. Each read from
    `eval_predictions.json`, which the evaluation writes."""
    squad = json.loads((files / "squad.json").read_text())["data"]
    row = next(r for r in squad if r["answers"]["text"] == ["Kuala Lumpur"])
    (tmp_path / "one.json").write_text(json.dumps({"data": [row]}))
    context = row["context"]

    renamed = [{"passage" if key == "context" else key: value for key, value in r.items()} for r in [row, *squad]]
    (tmp_path / "one-passage.json").write_text(json.dumps({"data": renamed[:1]}))
    (tmp_path / "passages.json").write_text(json.dumps({"data": renamed[1:]}))

    def answer(flags: list[str], train: str = str(files / "squad.json"), one: str = str(tmp_path / "one.json")) -> str:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        trainer, _, dataset, _ = prepared("question-answering", ["--train_file", train, "--validation_file", one,
                                                                 "--max_seq_length", "64", "--doc_stride", "16",
                                                                 *flags], folder)  # fmt: skip
        offsets = dataset["validation"][0]["offset_mapping"]

        def token(char: int, side: int) -> int:
            return next(k for k, span in enumerate(offsets) if span is not None and span[side] == char)

        start, kuala, lumpur = token(context.index("in Kuala"), 0), token(context.index("Kuala") + 5, 1), token(
            context.index("Lumpur") + 6, 1)  # fmt: skip
        starts, ends = np.full((1, 64), -20.0), np.full((1, 64), -20.0)
        starts[0, start], ends[0, kuala], ends[0, lumpur] = 10.0, 8.0, 9.0
        starts[0, 0] = ends[0, 0] = -5.0
        trainer.compute_metrics(transformers.EvalPrediction(predictions=(starts, ends), label_ids=None))
        answer.span = lumpur - start + 1
        return json.loads((folder / "out" / "eval_predictions.json").read_text())[row["id"]]

    assert answer([]) == "in Kuala Lumpur" and answer.span >= 3
    assert answer(["--max_answer_length", str(answer.span - 1)]) == "in Kuala"
    assert answer(["--n_best_size", "1"]) == "in Kuala Lumpur"
    assert answer(["--version_2_with_negative", "--null_score_diff_threshold", "-30"]) == ""
    assert answer(["--version_2_with_negative", "--null_score_diff_threshold", "-28"]) == "in Kuala Lumpur"
    passage = answer(
        ["--context_column_name", "passage"], str(tmp_path / "passages.json"), str(tmp_path / "one-passage.json")
    )  # the answer is cut out of the named column
    assert passage == "in Kuala Lumpur"
