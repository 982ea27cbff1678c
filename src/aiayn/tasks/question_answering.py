"""Answer spans in SQuAD's format (transformers' `run_qa`): `id`, `question`, `context` and `answers`
(`{"text": [...], "answer_start": [...]}`; no answer under SQuAD v2, `--version_2_with_negative`); SQuAD's exact
match and F1 (SQuAD v2's scores under v2, named as run_qa names them) beside the context's first words as the
answer (under v2, or no answer at all, whichever the training questions score better)."""

import os

import datasets
import numpy as np
import transformers

from ..metrics import Squad, SquadV2
from .qa_postprocessing import postprocess_qa_predictions
from .task import Task, prefixed, tokenized_splits


def check_answers(corpus: datasets.DatasetDict, data_args) -> None:
    """An `id` column; as many answer texts as answer starts; each answer where its `answer_start` says, in its
    context; an unanswerable question (no answer) only under `--version_2_with_negative`."""
    for split, examples in corpus.items():
        if "id" not in examples.column_names:
            raise ValueError(f"Question answering needs an 'id' column; the {split} data's columns are "
                             f"{examples.column_names}.")  # fmt: skip
        if data_args.answer_column not in examples.column_names:
            continue
        misplaced, unanswered, unequal = [], [], []
        for example in examples:
            answers = example[data_args.answer_column]
            texts, starts = (
                (answers.get(key) or [] for key in ("text", "answer_start"))
                if isinstance(answers, dict)
                else (None, ())
            )
            if texts is None or len(texts) != len(starts):
                unequal.append(example["id"])
                continue
            if not answers["text"]:
                unanswered.append(example["id"])
            for text, start in zip(answers["text"], answers["answer_start"], strict=True):
                if example[data_args.context_column][start : start + len(text)] != text:
                    misplaced.append(example["id"])
        if unequal:
            raise ValueError(f"{len(unequal)} question(s) of the {split} data do not have as many answer texts as "
                             f"answer starts in {data_args.answer_column!r} (ids {unequal[:5]}): SQuAD's answers are "
                             '{"text": [...], "answer_start": [...]}, one start per text.')  # fmt: skip
        if misplaced:
            raise ValueError(f"{len(misplaced)} answer(s) of the {split} data are not in their context where their "
                             f"answer_start says (ids {misplaced[:5]}).")  # fmt: skip
        if unanswered and not data_args.version_2_with_negative:
            raise ValueError(f"{len(unanswered)} question(s) of the {split} data have no answer (ids "
                             f"{unanswered[:5]}): that is SQuAD v2, --version_2_with_negative.")  # fmt: skip


def question_answering_texts(dataset: datasets.Dataset, data_args):
    yield from dataset[data_args.context_column]
    yield from dataset[data_args.question_column]


def answer_tokens(offsets, sequence_ids: list, answers: dict, context_index: int, null_index: int) -> tuple[int, int]:
    """The first and last token of the first answer, where the window's context tokens hold all of it; else the
    null answer, `(null_index, null_index)` (run_qa's `prepare_train_features`, its search kept to the context's
    tokens: run_qa's runs on past an answer that ends the context, onto [SEP], whose offsets are (0, 0))."""
    if not answers["answer_start"]:
        return null_index, null_index
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    context = [k for k, sequence in enumerate(sequence_ids) if sequence == context_index]
    first, last = context[0], context[-1]
    if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
        return null_index, null_index
    start, end = first, last
    while start <= last and offsets[start][0] <= start_char:
        start += 1
    while end >= first and offsets[end][1] >= end_char:
        end -= 1
    return start - 1, end + 1


def question_answering_features(examples, tokenizer, data_args) -> dict:
    """Question and context tokenized as a pair (the context first where the tokenizer pads on the left); a long
    context in windows of `block_size` tokens that overlap by `doc_stride`; each window with its example's id, its
    answer's first and last token and the character offsets of its context tokens (None elsewhere)."""
    context_index = 1 if tokenizer.padding_side == "right" else 0
    questions = [question.lstrip() for question in examples[data_args.question_column]]
    contexts = examples[data_args.context_column]
    pair = (questions, contexts) if context_index == 1 else (contexts, questions)
    encoded = tokenizer(
        *pair, truncation="only_second" if context_index == 1 else "only_first", max_length=data_args.block_size,
        stride=data_args.doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True,
        padding="max_length" if data_args.pad_to_max_length else False,
    )  # fmt: skip
    example_of = encoded.pop("overflow_to_sample_mapping")
    encoded["example_id"], encoded["start_positions"], encoded["end_positions"] = [], [], []
    for i, offsets in enumerate(encoded["offset_mapping"]):
        sequence_ids = encoded.sequence_ids(i)
        example = example_of[i]
        if data_args.answer_column in examples:
            ids = encoded["input_ids"][i]
            null_index = ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in ids else 0  # run_qa's CLS
            answers = examples[data_args.answer_column][example]
            start, end = answer_tokens(offsets, sequence_ids, answers, context_index, null_index)
            encoded["start_positions"].append(start)
            encoded["end_positions"].append(end)
        encoded["example_id"].append(examples["id"][example])
        encoded["offset_mapping"][i] = [span if sequence_ids[k] == context_index else None
                                        for k, span in enumerate(offsets)]  # fmt: skip
    if data_args.answer_column not in examples:
        del encoded["start_positions"], encoded["end_positions"]
    return encoded


def question_answering_dataset(corpus, tokenizer, model, data_args) -> datasets.DatasetDict:
    """Each split's windows (`question_answering_features`); a `--doc_stride` the windows' context cannot exceed
    (`--max_seq_length` less the longest question and the special tokens) is an error that says so."""
    questions = [question.lstrip() for split in corpus.values() for question in split[data_args.question_column]]
    longest = max((len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]), default=0)
    room = data_args.block_size - longest - tokenizer.num_special_tokens_to_add(pair=True)
    if data_args.doc_stride >= room:
        raise ValueError(f"--doc_stride ({data_args.doc_stride}) must be shorter than the context's share of a "
                         f"window: --max_seq_length {data_args.block_size} less the longest question ({longest} "
                         f"tokens) and the special tokens leaves {room}; the windows would not advance.")  # fmt: skip
    return tokenized_splits(
        corpus, lambda batch, split: question_answering_features(batch, tokenizer, data_args), data_args
    )


def question_answering_collator(tokenizer, model, data_args, seed: int):
    if data_args.pad_to_max_length:
        return transformers.DefaultDataCollator()
    return transformers.DataCollatorWithPadding(tokenizer)


def answers_of(predictions, features, examples, data_args, **files) -> dict[str, str]:
    return postprocess_qa_predictions(
        examples, features, tuple(predictions[:2]), data_args.version_2_with_negative, data_args.n_best_size,
        data_args.max_answer_length, data_args.null_score_diff_threshold, context_column=data_args.context_column,
        **files,
    )  # fmt: skip


def squad_scores(answers: dict, examples: datasets.Dataset, data_args) -> dict:
    """SQuAD's `exact_match` and `f1` (in percent); under v2 SQuAD v2's `exact`, `f1`, `total`, their `HasAns_` and
    `NoAns_` shares and the `best_` ones (`SquadV2`), as run_qa's metrics name them."""
    references = [example[data_args.answer_column]["text"] for example in examples]
    predictions = [answers[example["id"]] for example in examples]
    metric = SquadV2() if data_args.version_2_with_negative else Squad()
    return metric.compute(predictions=predictions, references=references)


def question_answering_metrics(tokenizer, training_args, model, corpus, dataset, data_args, split: str) -> dict:
    """SQuAD's scores of the answers `postprocess_qa_predictions` cuts out of the contexts of `split`; each
    evaluation also writes `eval_predictions.json`, `eval_nbest_predictions.json` and, under v2, `eval_null_odds.json`
    to the output folder, as run_qa does."""

    def compute(eval_prediction) -> dict:
        files = {}
        if split == "validation" and training_args.process_index == 0:
            os.makedirs(training_args.output_dir, exist_ok=True)
            files = {"output_dir": training_args.output_dir, "prefix": "eval"}
        answers = answers_of(eval_prediction.predictions, dataset[split], corpus[split], data_args, **files)
        return squad_scores(answers, corpus[split], data_args)

    return {"compute_metrics": compute}


def first_words(corpus: datasets.DatasetDict, split: str, words: int, data_args) -> dict[str, str]:
    """The first `words` words of each context of `split`, by id."""
    return {example["id"]: " ".join(example[data_args.context_column].split()[:words]) for example in corpus[split]}


def question_answering_baseline(trainer, corpus, data_args) -> dict:
    """The first words of each context as its answer, as many as the training answers' median: where answers sit
    and how long they are, learned without reading the question. Under SQuAD v2, that or no answer at all,
    whichever scores the better F1 on the training questions (a model that always abstains scores every
    unanswerable question)."""
    lengths = [len(text.split()) for answers in corpus["train"][data_args.answer_column] for text in answers["text"]]
    words = int(np.median(lengths)) if lengths else 1
    rules = {"span": lambda split: first_words(corpus, split, words, data_args)}
    if data_args.version_2_with_negative:
        rules["abstain"] = lambda split: dict.fromkeys(corpus[split]["id"], "")
    trained = {name: squad_scores(rule("train"), corpus["train"], data_args)["f1"] for name, rule in rules.items()}
    best = max(rules, key=lambda name: trained[name])  # the span rule where they tie
    scores = squad_scores(rules[best]("validation"), corpus["validation"], data_args)
    return prefixed({name: scores[name] for name in ("exact", "exact_match", "f1") if name in scores},
                    "eval_baseline_")  # fmt: skip


def write_answer_predictions(output, trainer, corpus, dataset, data_args, folder: str) -> None:
    """`predict_predictions.json` (each id's answer), `predict_nbest_predictions.json` and, under SQuAD v2,
    `predict_null_odds.json`, as run_qa writes them."""
    answers_of(output.predictions, dataset["test"], corpus["test"], data_args, output_dir=folder, prefix="predict")


TASK = Task(
    help="answer spans in SQuAD's format (run_qa)",
    script="run_qa",
    auto_class=transformers.AutoModelForQuestionAnswering,
    pipeline_task="question-answering",
    preset="tiny-encoder",
    columns={"question_column": ("question",), "context_column": ("context",), "answer_column": ("answers",)},
    data_fields=(
        "question_column",
        "context_column",
        "answer_column",
        "block_size",
        "doc_stride",
        "n_best_size",
        "max_answer_length",
        "version_2_with_negative",
        "null_score_diff_threshold",
        "pad_to_max_length",
    ),
    defaults={"block_size": 384, "doc_stride": 128, "pad_to_max_length": True},
    target_columns=("answer_column",),
    headline=("eval_f1",),
    predict_prefix="test",
    check=check_answers,
    texts=question_answering_texts,
    preprocess=question_answering_dataset,
    collator=question_answering_collator,
    metrics=question_answering_metrics,
    baseline=question_answering_baseline,
    write_predictions=write_answer_predictions,
)
