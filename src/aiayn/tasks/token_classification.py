"""A tag per word, e.g. named entities (transformers' `run_ner`): a list of words and a tag per word; seqeval's
entity-level precision, recall and F1 beside each word tagged with its most frequent training tag."""

import collections
import os

import datasets
import transformers

from ..metrics import Seqeval
from .task import Task, check_seen, first_split, map_options, prefixed


def tag_names(corpus: datasets.DatasetDict, data_args) -> list[str]:
    """The tags of the label column: a `ClassLabel`'s names in its order, else the training split's values, sorted,
    as strings. A column that does not hold a list of tags per example is an error that names it."""
    inner = _inner_feature(first_split(corpus), data_args)
    if isinstance(inner, datasets.ClassLabel):
        return list(inner.names)
    if not isinstance(inner, datasets.Value) or not inner.dtype.startswith(("string", "large_string", "int")):
        raise ValueError(
            f"Token classification needs a list of tags (strings or integers) per example in the label column "
            f"{data_args.label_column!r}; it holds {first_split(corpus).features[data_args.label_column]}."
        )
    return sorted({str(tag) for tags in first_split(corpus)[data_args.label_column] for tag in tags})


def _inner_feature(dataset: datasets.Dataset, data_args):
    """The feature of each tag of the label column (None where the column is not a list)."""
    return getattr(dataset.features[data_args.label_column], "feature", None)


def word_tags(dataset: datasets.Dataset, data_args) -> list[list[str]]:
    """Each example's tags as strings (a `ClassLabel`'s names)."""
    inner = _inner_feature(dataset, data_args)
    as_name = inner.int2str if isinstance(inner, datasets.ClassLabel) else str
    return [[as_name(tag) for tag in tags] for tags in dataset[data_args.label_column]]


def check_tags(corpus: datasets.DatasetDict, data_args) -> None:
    """A tag list per example, as long as its words, and no validation tag the training data lacks."""
    tag_names(corpus, data_args)
    for split, examples in corpus.items():
        if data_args.label_column not in examples.column_names:
            raise ValueError(f"The {split} data has no tags ({data_args.label_column!r}); run_ner's predictions need "
                             "them too, to know where each word starts.")  # fmt: skip
        for index, (words, tags) in enumerate(zip(examples[data_args.text_column], examples[data_args.label_column],
                                                  strict=True)):  # fmt: skip
            if len(words) != len(tags):
                raise ValueError(f"Example {index} of the {split} data has {len(words)} words and {len(tags)} tags.")
    check_seen(corpus, data_args.label_column, "tag", lambda tags: tags)


def tag_fields(corpus: datasets.DatasetDict, data_args) -> dict:
    names = tag_names(corpus, data_args)
    return {"id2label": dict(enumerate(names)), "label2id": {name: i for i, name in enumerate(names)}}


def token_texts(dataset: datasets.Dataset, data_args):
    for words in dataset[data_args.text_column]:
        yield " ".join(words)


def inside_tags(label2id: dict) -> dict[int, int]:
    """Each tag's id -> the id a word's later sub-words take under `--label_all_tokens`: `B-X` becomes `I-X` where
    that tag exists (run_ner's `b_to_i_label`), any other tag stays."""
    return {i: label2id.get("I-" + tag[2:], i) if tag.startswith("B-") else i for tag, i in label2id.items()}


def subword_labels(word_ids: list[int | None], labels: list[int], label_all_tokens: bool, inside: dict) -> list[int]:
    """A word's tag on its first sub-word; its other sub-words -100 (not scored), or with `label_all_tokens` its tag
    (`B-X` as `I-X`); special tokens -100."""
    aligned, previous = [], None
    for word in word_ids:
        if word is None:
            aligned.append(-100)
        elif word != previous:
            aligned.append(labels[word])
        else:
            aligned.append(inside[labels[word]] if label_all_tokens else -100)
        previous = word
    return aligned


def token_classification_dataset(corpus, tokenizer, model, data_args) -> datasets.DatasetDict:
    """Words tokenized into sub-words (`is_split_into_words`), labelled by `subword_labels`."""
    label2id = model.config.label2id
    inside = inside_tags(label2id)

    def tokenize(examples, tags):
        encoded = tokenizer(examples[data_args.text_column], max_length=data_args.block_size, truncation=True,
                            is_split_into_words=True,
                            padding="max_length" if data_args.pad_to_max_length else False)  # fmt: skip
        encoded["labels"] = [
            subword_labels(encoded.word_ids(i), [label2id[tag] for tag in example], data_args.label_all_tokens, inside)
            for i, example in enumerate(tags)
        ]
        return encoded

    prepared = {}
    for split, examples in corpus.items():
        tags = word_tags(examples, data_args)
        unknown = sorted({tag for example in tags for tag in example} - set(label2id))
        if unknown:
            raise ValueError(f"The {split} data holds tags the model does not know, {unknown[:10]}; its tags are "
                             f"{sorted(label2id)}.")  # fmt: skip
        prepared[split] = examples.map(
            lambda batch, indices, tags=tags: tokenize(batch, [tags[i] for i in indices]),
            batched=True, with_indices=True, remove_columns=examples.column_names, desc="Tokenizing",
            **map_options(data_args),
        )  # fmt: skip
    return datasets.DatasetDict(prepared)


def token_classification_collator(tokenizer, model, data_args, seed: int):
    return transformers.DataCollatorForTokenClassification(tokenizer)


def scored_tags(predictions, label_ids, id2label: dict) -> tuple[list[list[str]], list[list[str]]]:
    """The predicted (the best of each position's logits, `predictions`) and the reference tag of each scored position
    (a label other than -100), as strings."""
    predicted, expected = [], []
    for row, labels in zip(predictions.argmax(-1), label_ids, strict=True):
        kept = labels != -100
        predicted.append([id2label[int(i)] for i in row[kept]])
        expected.append([id2label[int(i)] for i in labels[kept]])
    return predicted, expected


def token_classification_metrics(tokenizer, training_args, model, corpus, dataset, data_args, split: str) -> dict:
    """seqeval's entity-level precision, recall and F1 and its token accuracy over the scored positions (each word's
    first sub-word, every sub-word with `--label_all_tokens`, as run_ner scores them); with
    `--return_entity_level_metrics`, each entity type's too."""

    def compute(eval_prediction) -> dict:
        predicted, expected = scored_tags(
            eval_prediction.predictions, eval_prediction.label_ids, model.config.id2label
        )
        return Seqeval().compute(predictions=predicted, references=expected,
                                 entity_level=data_args.return_entity_level_metrics)  # fmt: skip

    return {"compute_metrics": compute}


def most_frequent_tags(train_words: list[list[str]], train_tags: list[list[str]]) -> tuple[dict[str, str], str]:
    """Each training word's most frequent tag (ties: the tag seen first), and the most frequent tag overall."""
    by_word, overall = collections.defaultdict(collections.Counter), collections.Counter()
    for words, tags in zip(train_words, train_tags, strict=True):
        for word, tag in zip(words, tags, strict=True):
            by_word[word][tag] += 1
            overall[tag] += 1
    return {word: counts.most_common(1)[0][0] for word, counts in by_word.items()}, overall.most_common(1)[0][0]


def token_classification_baseline(trainer, corpus, data_args) -> dict:
    """Each word tagged with its most frequent tag in the training words (a word never seen: the most frequent tag),
    the standard baseline of tagging: its entity scores and token accuracy."""
    tags_of, majority = most_frequent_tags(
        corpus["train"][data_args.text_column], word_tags(corpus["train"], data_args)
    )
    validation = corpus["validation"]
    predicted = [[tags_of.get(word, majority) for word in words] for words in validation[data_args.text_column]]
    scores = Seqeval().compute(predictions=predicted, references=word_tags(validation, data_args))
    return prefixed(scores, "eval_baseline_")


def write_tag_predictions(output, trainer, corpus, dataset, data_args, folder: str) -> None:
    """`predictions.txt`: each test example's predicted tags at its scored positions, space-separated, a line each
    (run_ner's file; as there, the test data holds tags, which say where the words start)."""
    predicted, _ = scored_tags(output.predictions, output.label_ids, trainer.model.config.id2label)
    with open(os.path.join(folder, "predictions.txt"), "w", encoding="utf-8") as f:
        f.writelines(" ".join(tags) + "\n" for tags in predicted)


TASK = Task(
    help="a tag per word, e.g. named entities (run_ner)",
    script="run_ner",
    auto_class=transformers.AutoModelForTokenClassification,
    pipeline_task="token-classification",
    preset="tiny-encoder",
    columns={"text_column": ("tokens", "words"), "label_column": ("ner_tags", "tags", "labels")},
    data_fields=(
        "text_column",
        "label_column",
        "block_size",
        "label_all_tokens",
        "return_entity_level_metrics",
        "pad_to_max_length",
    ),
    defaults={"block_size": None},
    headline=("eval_f1",),
    check=check_tags,
    config_fields=tag_fields,
    texts=token_texts,
    preprocess=token_classification_dataset,
    collator=token_classification_collator,
    metrics=token_classification_metrics,
    baseline=token_classification_baseline,
    write_predictions=write_tag_predictions,
)
