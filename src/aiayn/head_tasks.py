"""The tasks that train the heads beyond language modelling and translation, in the conventions of transformers'
example scripts: token classification (`run_ner`), extractive question answering (`run_qa`), multiple choice
(`run_swag`) and text to text from a source and a target column (`run_summarization`).

Each task is a set of functions that `aiayn.training.TASKS` names: the texts a new tokenizer learns from, the config
fields read off the data, the preprocessing, the collator, the metrics and the baseline that learns nothing. They
take the arguments of their kind in `aiayn.training` (`data_args` is its `DataArguments`).
"""

import collections
from collections.abc import Callable, Iterator

import datasets
import numpy as np
from transformers import DataCollatorForMultipleChoice, DataCollatorForTokenClassification

from .baselines import majority_accuracy
from .metrics import Accuracy, Rouge, Seqeval, Squad

# Token classification (run_ner): a list of words and a tag per word.


def token_label_names(corpus: datasets.DatasetDict, data_args) -> list[str]:
    """The tags of the label column: a `ClassLabel`'s names in its order, else the values found, sorted, as strings.
    A column that does not hold a list of tags per example is an error that names it."""
    feature = corpus["train"].features[data_args.label_column]
    inner = getattr(feature, "feature", None)
    if isinstance(feature, list):
        inner = feature[0]
    if isinstance(inner, datasets.ClassLabel):
        return list(inner.names)
    if not isinstance(inner, datasets.Value) or not inner.dtype.startswith(("string", "large_string", "int")):
        raise ValueError(
            f"Token classification needs a list of tags (strings or integers) per example in the label column "
            f"{data_args.label_column!r}; it holds {feature}."
        )
    return sorted({str(tag) for split in corpus.values() for tags in split[data_args.label_column] for tag in tags})


def _tags(corpus: datasets.DatasetDict, data_args, split: str) -> list[list[str]]:
    """Each example's tags of `split` as strings (a `ClassLabel`'s names)."""
    names = token_label_names(corpus, data_args)
    feature = corpus[split].features[data_args.label_column]
    inner = feature[0] if isinstance(feature, list) else feature.feature
    as_name = (lambda tag: names[tag]) if isinstance(inner, datasets.ClassLabel) else str
    return [[as_name(tag) for tag in tags] for tags in corpus[split][data_args.label_column]]


def token_texts(dataset: datasets.Dataset, data_args) -> Iterator[str]:
    for words in dataset[data_args.text_column]:
        yield " ".join(words)


def token_classification_fields(corpus: datasets.DatasetDict, data_args) -> dict:
    names = token_label_names(corpus, data_args)
    return {"id2label": dict(enumerate(names)), "label2id": {name: i for i, name in enumerate(names)}}


def token_classification_dataset(corpus, tokenizer, model, data_args) -> datasets.DatasetDict:
    """Words tokenized into sub-words (`is_split_into_words`); a word's tag goes to its first sub-word, the others
    and the special tokens get -100 (transformers' `run_ner` without `--label_all_tokens`)."""
    label2id = model.config.label2id

    def tokenize(examples, tags):
        encoded = tokenizer(examples[data_args.text_column], max_length=data_args.block_size, truncation=True,
                            is_split_into_words=True)  # fmt: skip
        encoded["labels"] = [
            _first_subword_labels(encoded.word_ids(i), [label2id[tag] for tag in example_tags])
            for i, example_tags in enumerate(tags)
        ]
        return encoded

    prepared = {}
    for split, dataset in corpus.items():
        tags = _tags(corpus, data_args, split)
        prepared[split] = dataset.map(
            lambda examples, indices, tags=tags: tokenize(examples, [tags[i] for i in indices]),
            batched=True, with_indices=True, remove_columns=dataset.column_names, desc="Tokenizing",
        )  # fmt: skip
    return datasets.DatasetDict(prepared)


def _first_subword_labels(word_ids: list[int | None], labels: list[int]) -> list[int]:
    aligned, previous = [], None
    for word in word_ids:
        aligned.append(-100 if word is None or word == previous else labels[word])
        previous = word
    return aligned


def token_classification_collator(tokenizer, model, data_args, seed: int):
    return DataCollatorForTokenClassification(tokenizer)


def _word_tags(eval_prediction, id2label: dict) -> tuple[list[list[str]], list[list[str]]]:
    """The predicted and the reference tag of each word (each position with a label), as strings."""
    predictions = eval_prediction.predictions
    predictions = predictions.argmax(-1) if predictions.ndim == 3 else predictions
    predicted, expected = [], []
    for row, labels in zip(predictions, eval_prediction.label_ids, strict=True):
        kept = labels != -100
        predicted.append([id2label[int(i)] for i in row[kept]])
        expected.append([id2label[int(i)] for i in labels[kept]])
    return predicted, expected


def token_classification_metrics(tokenizer, training_args, model, corpus, dataset, data_args) -> dict:
    """seqeval's entity-level precision, recall and F1 and its token accuracy, over the first sub-word of each word."""

    def compute(eval_prediction) -> dict:
        predicted, expected = _word_tags(eval_prediction, model.config.id2label)
        return Seqeval().compute(predictions=predicted, references=expected)

    return {"compute_metrics": compute}


def token_classification_baseline(trainer, corpus, data_args) -> dict:
    """Every word tagged with the most frequent tag of the training words: its token accuracy and entity scores."""
    train, evaluated = _tags(corpus, data_args, "train"), _tags(corpus, data_args, "validation")
    majority = collections.Counter(tag for tags in train for tag in tags).most_common(1)[0][0]
    scores = Seqeval().compute(predictions=[[majority] * len(tags) for tags in evaluated], references=evaluated)
    return {f"eval_baseline_{name}": value for name, value in scores.items()}


# Extractive question answering (run_qa): SQuAD's columns, `answers` = {"text": [...], "answer_start": [...]}.


def question_answering_texts(dataset: datasets.Dataset, data_args) -> Iterator[str]:
    yield from dataset[data_args.context_column]
    yield from dataset[data_args.question_column]


def _question_answering_features(examples, tokenizer, data_args) -> dict:
    """Question and context tokenized as a pair; a long context in windows of `block_size` tokens that overlap by
    `doc_stride`; each window with its example's id, its answer's start and end token (the first token when the
    answer is not inside the window, as `run_qa` does) and the character offsets of its context tokens."""
    questions = [question.lstrip() for question in examples[data_args.question_column]]
    encoded = tokenizer(
        questions, examples[data_args.context_column], truncation="only_second", max_length=data_args.block_size,
        stride=data_args.doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True,
        padding="max_length",
    )  # fmt: skip
    example_of = encoded.pop("overflow_to_sample_mapping")
    encoded["example_id"], encoded["start_positions"], encoded["end_positions"] = [], [], []
    for i, offsets in enumerate(encoded["offset_mapping"]):
        sequence_ids = encoded.sequence_ids(i)
        example = example_of[i]
        answers = examples[data_args.answer_column][example]
        start, end = _answer_tokens(offsets, sequence_ids, answers)
        encoded["start_positions"].append(start)
        encoded["end_positions"].append(end)
        encoded["example_id"].append(examples["id"][example])
        encoded["offset_mapping"][i] = [span if sequence_ids[k] == 1 else None for k, span in enumerate(offsets)]
    return encoded


def _answer_tokens(offsets, sequence_ids: list, answers: dict) -> tuple[int, int]:
    """The first and last token of the first answer within the window's context tokens, or (0, 0)."""
    if not answers["answer_start"]:
        return 0, 0
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    context = [k for k, sequence in enumerate(sequence_ids) if sequence == 1]
    if not context or offsets[context[0]][0] > start_char or offsets[context[-1]][1] < end_char:
        return 0, 0
    start = next(k for k in context if offsets[k][1] > start_char)
    end = next(k for k in reversed(context) if offsets[k][0] < end_char)
    return start, end


def question_answering_dataset(corpus, tokenizer, model, data_args) -> datasets.DatasetDict:
    missing = [column for column in ("id",) if column not in corpus["train"].column_names]
    if missing:
        raise ValueError(f"Question answering needs an 'id' column; the columns are {corpus['train'].column_names}.")
    return corpus.map(
        lambda examples: _question_answering_features(examples, tokenizer, data_args),
        batched=True, remove_columns=corpus["train"].column_names, desc="Tokenizing",
    )  # fmt: skip


def question_answering_collator(tokenizer, model, data_args, seed: int):
    from transformers import DefaultDataCollator

    return DefaultDataCollator()


def best_answers(start_logits, end_logits, features: datasets.Dataset, examples: datasets.Dataset, data_args) -> dict:
    """Each example's answer: of the `n_best_size` best start and end tokens of each of its windows, the span of
    context tokens at most `max_answer_length` long with the highest start + end logit, cut out of the context by
    the tokens' character offsets (transformers' `postprocess_qa_predictions` without null answers)."""
    windows = collections.defaultdict(list)
    for index, example_id in enumerate(features["example_id"]):
        windows[example_id].append(index)
    offsets = features["offset_mapping"]
    answers = {}
    for example in examples:
        best, text = -np.inf, ""
        for index in windows[example["id"]]:
            starts = np.argsort(start_logits[index])[::-1][: data_args.n_best_size]
            ends = np.argsort(end_logits[index])[::-1][: data_args.n_best_size]
            for start in starts:
                for end in ends:
                    if not _is_span(offsets[index], start, end, data_args.max_answer_length):
                        continue
                    score = start_logits[index][start] + end_logits[index][end]
                    if score > best:
                        best = score
                        text = example[data_args.context_column][offsets[index][start][0] : offsets[index][end][1]]
        answers[example["id"]] = text
    return answers


def _is_span(offsets: list, start: int, end: int, max_length: int) -> bool:
    inside = start < len(offsets) and end < len(offsets) and offsets[start] is not None and offsets[end] is not None
    return inside and start <= end < start + max_length


def _squad_scores(answers: dict, examples: datasets.Dataset, data_args, prefix: str) -> dict:
    references = [example[data_args.answer_column]["text"] or [""] for example in examples]
    predictions = [answers[example["id"]] for example in examples]
    scores = Squad().compute(predictions=predictions, references=references)
    return {f"{prefix}{name}": value for name, value in scores.items()}


def question_answering_metrics(tokenizer, training_args, model, corpus, dataset, data_args) -> dict:
    """SQuAD's exact match and F1 of the answers `best_answers` cuts out of the validation contexts."""

    def compute(eval_prediction) -> dict:
        start_logits, end_logits = eval_prediction.predictions[:2]
        answers = best_answers(start_logits, end_logits, dataset["validation"], corpus["validation"], data_args)
        return _squad_scores(answers, corpus["validation"], data_args, prefix="")

    return {"compute_metrics": compute}


def question_answering_baseline(trainer, corpus, data_args) -> dict:
    """The first words of each context as its answer, as many as the training answers' median: where answers sit
    and how long they are, learned without reading the question."""
    lengths = [len(text.split()) for answers in corpus["train"][data_args.answer_column] for text in answers["text"]]
    words = int(np.median(lengths)) if lengths else 1
    validation = corpus["validation"]
    answers = {example["id"]: " ".join(example[data_args.context_column].split()[:words]) for example in validation}
    return _squad_scores(answers, validation, data_args, prefix="eval_baseline_")


# Multiple choice (run_swag): a context, the start of the answer, endings ending0 ... endingN and the right one.


def ending_columns(dataset: datasets.Dataset) -> list[str]:
    """SWAG's `ending0`, `ending1`, ... columns, in order."""
    endings = sorted((c for c in dataset.column_names if c.startswith("ending") and c[6:].isdigit()),
                     key=lambda c: int(c[6:]))  # fmt: skip
    if len(endings) < 2:
        raise ValueError(
            f"Multiple choice needs columns ending0, ending1, ...; the columns are {dataset.column_names}."
        )
    return endings


def multiple_choice_texts(dataset: datasets.Dataset, data_args) -> Iterator[str]:
    yield from dataset[data_args.context_column]
    for column in (data_args.question_column, *ending_columns(dataset)):
        yield from dataset[column]


def multiple_choice_dataset(corpus, tokenizer, model, data_args) -> datasets.DatasetDict:
    """Each example as one pair of texts per ending, the context first and the answer's start with the ending second,
    `block_size` tokens at most; `labels` is the index of the right ending."""
    endings = ending_columns(corpus["train"])

    def tokenize(examples):
        count = len(examples[data_args.context_column])
        firsts = [context for context in examples[data_args.context_column] for _ in endings]
        seconds = [f"{examples[data_args.question_column][i]} {examples[e][i]}" for i in range(count) for e in endings]
        encoded = tokenizer(firsts, seconds, max_length=data_args.block_size, truncation=True)
        grouped = {key: [values[i : i + len(endings)] for i in range(0, len(values), len(endings))]
                   for key, values in encoded.items()}  # fmt: skip
        grouped["labels"] = examples[data_args.label_column]
        return grouped

    return corpus.map(tokenize, batched=True, remove_columns=corpus["train"].column_names, desc="Tokenizing")


def multiple_choice_collator(tokenizer, model, data_args, seed: int):
    return DataCollatorForMultipleChoice(tokenizer)


def _choice_accuracy(eval_prediction) -> dict:
    predictions = eval_prediction.predictions.argmax(-1)
    return Accuracy().compute(predictions=predictions, references=eval_prediction.label_ids)


def multiple_choice_metrics(tokenizer, training_args, model, corpus, dataset, data_args) -> dict:
    return {"compute_metrics": _choice_accuracy}


def multiple_choice_baseline(trainer, corpus, data_args) -> dict:
    """Always the ending that is most often right in training."""
    labels = corpus["train"][data_args.label_column], corpus["validation"][data_args.label_column]
    return {"eval_baseline_accuracy": majority_accuracy(*labels)}


def check_choice_labels(corpus: datasets.DatasetDict, data_args) -> dict:
    """No config fields; an error that names the label column when it does not hold the right ending's index."""
    feature = corpus["train"].features[data_args.label_column]
    if not isinstance(feature, datasets.ClassLabel) and not str(getattr(feature, "dtype", "")).startswith("int"):
        raise ValueError(
            f"Multiple choice needs the index of the right ending (an integer) in the label column "
            f"{data_args.label_column!r}; it holds {feature}."
        )
    return {}


# Text to text (run_summarization): a source column and a target column.


def text_pair_texts(dataset: datasets.Dataset, data_args) -> Iterator[str]:
    yield from dataset[data_args.text_column]
    yield from dataset[data_args.summary_column]


def summarization_dataset(corpus, tokenizer, model, data_args) -> datasets.DatasetDict:
    """`source_prefix` + the source column as inputs (`max_source_length` tokens), the target column as labels
    (`max_target_length` tokens)."""

    def tokenize(examples):
        sources = [data_args.source_prefix + text for text in examples[data_args.text_column]]
        encoded = tokenizer(sources, max_length=data_args.max_source_length, truncation=True)
        targets = tokenizer(text_target=examples[data_args.summary_column], max_length=data_args.max_target_length,
                            truncation=True)  # fmt: skip
        encoded["labels"] = targets["input_ids"]
        return encoded

    return corpus.map(tokenize, batched=True, remove_columns=corpus["train"].column_names, desc="Tokenizing")


def _generated_texts(tokenizer, eval_prediction) -> tuple[list[str], list[str]]:
    """The generated and the reference texts (the trainer pads generated sequences and labels with -100)."""
    predictions = eval_prediction.predictions.clip(min=0)
    labels = np.where(eval_prediction.label_ids == -100, tokenizer.pad_token_id, eval_prediction.label_ids)
    decode: Callable = tokenizer.batch_decode
    return (
        [text.strip() for text in decode(predictions, skip_special_tokens=True)],
        [text.strip() for text in decode(labels, skip_special_tokens=True)],
    )


def summarization_metrics(tokenizer, training_args, model, corpus, dataset, data_args) -> dict:
    """ROUGE of the generated texts, where the evaluation generates (`predict_with_generate`)."""

    def compute(eval_prediction) -> dict:
        predictions, references = _generated_texts(tokenizer, eval_prediction)
        return Rouge().compute(predictions=predictions, references=references)

    return {"compute_metrics": compute} if getattr(training_args, "predict_with_generate", False) else {}


def summarization_baseline(trainer, corpus, data_args) -> dict:
    """ROUGE of each source copied as its own output, where the evaluation generates."""
    if not getattr(trainer.args, "predict_with_generate", False):
        return {}
    validation = corpus["validation"]
    scores = Rouge().compute(predictions=validation[data_args.text_column],
                             references=validation[data_args.summary_column])  # fmt: skip
    return {f"eval_baseline_{name}": value for name, value in scores.items()}
