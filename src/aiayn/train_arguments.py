"""The flags of `aiayn train TASK`: which model (`ModelArguments`), which data (`DataArguments`, of which each task
reads its own, `Task.data_fields`, with its script's defaults, `Task.defaults`) and transformers'
`Seq2SeqTrainingArguments`. A flag of transformers' example scripts answers to its own name, means what it means
there, or is refused by name with the reason (`REFUSED_FLAGS`)."""

import argparse
import dataclasses
from dataclasses import dataclass, field

import transformers

from .tasks import TASKS


@dataclass
class ModelArguments:
    """Which model to train: a saved one (`model_name_or_path`) or a new one from a preset."""

    _argument_group_name = "model"

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "A folder saved by save_pretrained to fine-tune; otherwise --preset is built."}
    )
    preset: str | None = field(
        default=None, metadata={"help": "The preset of a new model (see `aiayn presets`); default: the task's."}
    )
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": "Config fields over the preset's, e.g. 'd_model=256,num_layers=4,dropout=0.2'; with "
            "--model_name_or_path, over the saved config's (e.g. the dropout of fine-tuning)."
        },
    )
    tokenizer_name: str | None = field(
        default=None,
        metadata={"help": "A folder with a saved tokenizer (the image tasks: a saved image processor, also "
                  "--image_processor_name); otherwise the model's, or a new one."},
    )  # fmt: skip
    config_name: str | None = field(
        default=None, metadata={"help": "A saved config (folder or config.json) of a new model, instead of --preset."}
    )
    cache_dir: str | None = field(default=None, metadata={"help": "Where hub models and datasets are cached."})
    model_revision: str = field(default="main", metadata={"help": "The hub revision (branch, tag or commit) to load."})
    token: str | None = field(default=None, metadata={"help": "The hub token of private models and datasets."})
    trust_remote_code: bool = field(
        default=False, metadata={"help": "Run a hub dataset's or model's own code (aiayn's folders need none)."}
    )
    use_fast_tokenizer: bool = field(
        default=True, metadata={"help": "Load the fast (tokenizers) tokenizer; aiayn's own tokenizers are fast ones."}
    )
    ignore_mismatched_sizes: bool = field(
        default=False, metadata={"help": "Load --model_name_or_path even where a head's size differs (new labels)."}
    )
    dtype: str | None = field(
        default=None, metadata={"help": "The dtype --model_name_or_path is loaded in (auto, float32, bfloat16)."}
    )
    vocab_size: int = field(default=8000, metadata={"help": "Vocabulary size of a tokenizer trained on the data."})
    attn_implementation: str | None = field(default=None, metadata={"help": "eager, sdpa, flex_attention, ..."})
    paper_recipe: bool = field(
        default=False,
        metadata={"help": "The paper's Adam, inverse-sqrt schedule (4000 warmup steps unless --warmup_steps is given) "
                  "and label smoothing (sections 5.3, 5.4); dropout stays the preset's. A new model trained "
                  "without --learning_rate gets the from-scratch recipe (`FROM_SCRATCH`) instead of 5e-5."},
    )  # fmt: skip


@dataclass
class DataArguments:
    """Which data to train on and how to cut it. A flag that means what a flag of transformers' example scripts
    means also answers to that script's name (`--train_file`, `--text_column_name`, `--max_seq_length`, ...)."""

    _argument_group_name = "data"

    dataset_name: str | None = field(
        default=None,
        metadata={"help": "A built-in corpus (shakespeare, shakespeare-genres, bible-en-de, pydoc, digits), a "
                  ".txt/.csv/.json/.jsonl/.parquet file, a folder saved with save_to_disk, a folder of images by "
                  "class, or a hub dataset; defaults to the task's corpus."},
    )  # fmt: skip
    dataset_config_name: str | None = field(default=None, metadata={"help": "Configuration of a hub dataset."})
    validation_split_percentage: int = field(
        default=5, metadata={"help": "Percent of the training data held out for validation where there is none."}
    )
    train_val_split: float | None = field(
        default=None,
        metadata={"help": "The share of the training data held out for validation where there is none, as a fraction "
                  "(run_image_classification's flag, whose 0.15 is this task's --validation_split_percentage 15); "
                  "where given, instead of --validation_split_percentage."},
    )  # fmt: skip
    train_dir: str | None = field(
        default=None,
        metadata={"help": "A folder of training images, one subfolder per class (instead of --dataset_name)."},
    )
    validation_dir: str | None = field(
        default=None,
        metadata={"help": "A folder of validation images, one subfolder per class, read with --train_dir so that "
                  "both share the classes; otherwise --train_val_split of --train_dir is held out."},
    )  # fmt: skip
    train_file: str | None = field(
        default=None, metadata={"help": "A .txt/.csv/.json/.jsonl/.parquet file of training examples."}
    )
    validation_file: str | None = field(
        default=None, metadata={"help": "The validation examples (default: a seeded twentieth of the training file)."}
    )
    test_file: str | None = field(
        default=None, metadata={"help": "The examples of --do_predict, whose predictions are written to --output_dir."}
    )
    keep_linebreaks: bool = field(
        default=True, metadata={"help": "Keep each line's line break in the texts of .txt files (run_clm)."}
    )
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "Processes that tokenize the data (Dataset.map's num_proc)."}
    )
    overwrite_cache: bool = field(
        default=False, metadata={"help": "Tokenize again rather than reuse the cached tokenized data."}
    )
    text_column: str | None = field(
        default=None,
        metadata={"help": "Column of the text (a list of words for token classification, the source for "
                  "summarization; for classification several, comma-separated); default: the task's usual name.",
                  "aliases": ["--text_column_name", "--text_column_names"]},
    )  # fmt: skip
    text_column_delimiter: str = field(
        default=" ", metadata={"help": "What joins the texts of several text columns (classification)."}
    )
    image_column: str = field(
        default="image", metadata={"help": "Column of the images (image tasks).", "aliases": ["--image_column_name"]}
    )
    label_column: str | None = field(
        default=None,
        metadata={"help": "Column of the class (classification), the tags (token classification) or the right "
                  "ending (multiple choice); default: the task's usual name.", "aliases": ["--label_column_name"]},
    )  # fmt: skip
    question_column: str | None = field(
        default=None,
        metadata={"help": "Column of the question (question answering) or of the answer's start (multiple choice).",
                  "aliases": ["--question_column_name"]},
    )  # fmt: skip
    context_column: str | None = field(
        default=None,
        metadata={"help": "Column of the context (question answering, multiple choice).",
                  "aliases": ["--context_column_name"]},
    )  # fmt: skip
    answer_column: str | None = field(
        default=None,
        metadata={"help": "Column of the answers, {text: [...], answer_start: [...]} (question answering).",
                  "aliases": ["--answer_column_name"]},
    )  # fmt: skip
    summary_column: str | None = field(
        default=None,
        metadata={"help": "Column of the target text (summarization)."},
    )
    source_lang: str = field(default="en", metadata={"help": "Source language key of the `translation` column."})
    target_lang: str = field(default="de", metadata={"help": "Target language key of the `translation` column."})
    source_prefix: str = field(default="", metadata={"help": "Text put before every source (e.g. 'summarize: ')."})
    block_size: int | None = field(
        default=None,
        metadata={"help": "Tokens per training block (language modelling), or per example (classification, token "
                  "classification, question answering windows, multiple choice); the task's script's default, "
                  "at most the model's max_position_embeddings; none: the model's.", "aliases": ["--max_seq_length"]},
    )  # fmt: skip
    pad_to_max_length: bool = field(
        default=False,
        metadata={"help": "Pad every example to --max_seq_length (text-to-text: sources to --max_source_length, "
                  "targets to --max_target_length) rather than each batch to its longest; masked LM's blocks are all "
                  "--max_seq_length long either way."},
    )  # fmt: skip
    doc_stride: int = field(
        default=128, metadata={"help": "Tokens shared by the overlapping windows of a long context."}
    )
    n_best_size: int = field(
        default=20, metadata={"help": "Start and end tokens tried per window (question answering)."}
    )
    max_answer_length: int = field(default=30, metadata={"help": "Tokens of the longest answer (question answering)."})
    version_2_with_negative: bool = field(
        default=False, metadata={"help": "SQuAD v2: questions may have no answer (an empty `answers`)."}
    )
    null_score_diff_threshold: float = field(
        default=0.0,
        metadata={"help": "SQuAD v2: no answer where the null score beats the best span's by more than this."},
    )
    label_all_tokens: bool = field(
        default=False,
        metadata={"help": "Tag every sub-word of a word (B- as I-) and score them all, rather than its first alone."},
    )
    return_entity_level_metrics: bool = field(
        default=False, metadata={"help": "Report each entity type's precision, recall, F1 and count too."}
    )
    max_source_length: int = field(default=1024, metadata={"help": "Source tokens kept per example."})
    max_target_length: int = field(default=128, metadata={"help": "Target tokens kept per training example."})
    val_max_target_length: int | None = field(
        default=None,
        metadata={"help": "Target tokens kept per evaluation and test example, and the longest generation there and "
                  "in the saved generation config (default: --max_target_length)."},
    )  # fmt: skip
    num_beams: int | None = field(
        default=None,
        metadata={"help": "Beams of the evaluation's and the saved generation config's beam search (summarization: "
                  "1, run_summarization's default; translation: unset, unlike run_translation's 1, so that a model "
                  "decodes as its generation config says: beam 4 for the paper's models)."},
    )  # fmt: skip
    ignore_pad_token_for_loss: bool = field(
        default=True,
        metadata={"help": "Leave the labels' padding out of the loss (-100); otherwise the pad token is a target."},
    )
    max_pair_tokens: int | None = field(
        default=None, metadata={"help": "Translation: leave out pairs with more tokens than this on either side."}
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens masked for masked LM."})
    mask_ratio: float = field(default=0.5, metadata={"help": "Share of patches masked (masked-image modelling)."})
    noise_density: float = field(default=0.15, metadata={"help": "Share of tokens corrupted (span corruption)."})
    mean_noise_span_length: float = field(default=3.0, metadata={"help": "Mean corrupted span length."})
    max_train_samples: int | None = field(
        default=None,
        metadata={"help": "Train on this many examples, drawn by a seeded shuffle (--seed), stratified by label "
                  "where there are labels."},
    )  # fmt: skip
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Evaluate on this many examples, drawn as --max_train_samples are."}
    )
    max_predict_samples: int | None = field(
        default=None, metadata={"help": "Predict on the first this many test examples."}
    )
    tokenizer_train_samples: int | None = field(
        default=None,
        metadata={"help": "Train a new tokenizer on this many training examples, every k-th of the split (all when "
                  "unset); the Unigram trainer's time grows with the text it reads."},
    )  # fmt: skip


# The data flags every task reads; each task adds its own (`Task.data_fields`).
COMMON_DATA_FIELDS = (
    "dataset_name", "dataset_config_name", "train_file", "validation_file", "test_file",
    "validation_split_percentage", "max_train_samples", "max_eval_samples", "max_predict_samples",
    "tokenizer_train_samples", "preprocessing_num_workers", "overwrite_cache", "keep_linebreaks",
)  # fmt: skip

# Flags of transformers' example scripts that `aiayn train` does not take, and why.
REFUSED_FLAGS = {
    "model_type": "a new model is an aiayn preset: --preset (see `aiayn presets`) with --config_overrides",
    "use_auth_token": "transformers replaced it with --token",
    "low_cpu_mem_usage": "transformers 5 always loads weights without a second copy",
    "streaming": "samples are a seeded, stratified shuffle of the whole split (--max_train_samples), which a stream "
                 "cannot give",
    "line_by_line": "texts are cut into blocks of --max_seq_length tokens, run_mlm's default",
    "do_regression": "classification trains classes; a regression head is not a task of aiayn train",
    "train_split_name": "a dataset's splits are read as train, validation and test; --train_file, --validation_file "
                        "and --test_file take any others",
    "validation_split_name": "see --train_split_name",
    "test_split_name": "see --train_split_name",
    "remove_splits": "only the train, validation and test splits are read",
    "remove_columns": "only the task's columns are read",
    "shuffle_train_dataset": "the Trainer shuffles the training data every epoch, seeded by --seed",
    "shuffle_seed": "the Trainer's shuffle is seeded by --seed",
    "metric_name": "each task reports its own metrics beside a baseline; hub metric scripts cannot be loaded offline",
    "task_name": "--label_column_name names the tag column (pos_tags, chunk_tags)",
    "lang": "for the multilingual tokenizers of mBART and M2M100, which aiayn's models do not use",
    "forced_bos_token": "for the multilingual tokenizers of mBART and M2M100, which aiayn's models do not use",
    "resize_position_embeddings": "positions are a config field: --config_overrides max_position_embeddings=N",
}  # fmt: skip


# The flags of transformers' example scripts (the fields of their argument dataclasses, read with `ast` from
# transformers v5.8's examples/pytorch, whose scripts `check_min_version("5.8.0")`), by script; the training flags are
# transformers' own (`Seq2SeqTrainingArguments`). Each is a flag of the script's task (`Task.script`), or refused by
# name (`REFUSED_FLAGS`); tests/test_train_flags.py checks both, and the scripts when TRANSFORMERS_EXAMPLES is set.
EXAMPLE_SCRIPT_FLAGS: dict[str, tuple[str, ...]] = {
    "run_clm": (
        "model_name_or_path", "model_type", "config_overrides", "config_name", "tokenizer_name", "cache_dir",
        "use_fast_tokenizer", "model_revision", "token", "trust_remote_code", "dtype", "dataset_name",
        "dataset_config_name", "train_file", "validation_file", "max_train_samples", "max_eval_samples", "streaming",
        "block_size", "overwrite_cache", "validation_split_percentage", "preprocessing_num_workers", "keep_linebreaks",
    ),
    "run_mlm": (
        "model_name_or_path", "model_type", "config_overrides", "config_name", "tokenizer_name", "cache_dir",
        "use_fast_tokenizer", "model_revision", "token", "trust_remote_code", "dtype", "dataset_name",
        "dataset_config_name", "train_file", "validation_file", "overwrite_cache", "validation_split_percentage",
        "max_seq_length", "preprocessing_num_workers", "mlm_probability", "line_by_line", "pad_to_max_length",
        "max_train_samples", "max_eval_samples", "streaming",
    ),
    "run_classification": (
        "dataset_name", "dataset_config_name", "do_regression", "text_column_names", "text_column_delimiter",
        "train_split_name", "validation_split_name", "test_split_name", "remove_splits", "remove_columns",
        "label_column_name", "max_seq_length", "preprocessing_num_workers", "overwrite_cache", "pad_to_max_length",
        "shuffle_train_dataset", "shuffle_seed", "max_train_samples", "max_eval_samples", "max_predict_samples",
        "metric_name", "train_file", "validation_file", "test_file", "model_name_or_path", "config_name",
        "tokenizer_name", "cache_dir", "use_fast_tokenizer", "model_revision", "token", "trust_remote_code",
        "ignore_mismatched_sizes",
    ),
    "run_ner": (
        "model_name_or_path", "config_name", "tokenizer_name", "cache_dir", "model_revision", "token",
        "trust_remote_code", "ignore_mismatched_sizes", "task_name", "dataset_name", "dataset_config_name",
        "train_file", "validation_file", "test_file", "text_column_name", "label_column_name", "overwrite_cache",
        "preprocessing_num_workers", "max_seq_length", "pad_to_max_length", "max_train_samples", "max_eval_samples",
        "max_predict_samples", "label_all_tokens", "return_entity_level_metrics",
    ),
    "run_qa": (
        "model_name_or_path", "config_name", "tokenizer_name", "cache_dir", "model_revision", "token",
        "trust_remote_code", "dataset_name", "dataset_config_name", "train_file", "validation_file", "test_file",
        "overwrite_cache", "preprocessing_num_workers", "max_seq_length", "pad_to_max_length", "max_train_samples",
        "max_eval_samples", "max_predict_samples", "version_2_with_negative", "null_score_diff_threshold",
        "doc_stride", "n_best_size", "max_answer_length",
    ),
    "run_swag": (
        "model_name_or_path", "config_name", "tokenizer_name", "cache_dir", "use_fast_tokenizer", "model_revision",
        "token", "trust_remote_code", "train_file", "validation_file", "overwrite_cache", "preprocessing_num_workers",
        "max_seq_length", "pad_to_max_length", "max_train_samples", "max_eval_samples",
    ),
    "run_summarization": (
        "model_name_or_path", "config_name", "tokenizer_name", "cache_dir", "use_fast_tokenizer", "model_revision",
        "token", "trust_remote_code", "resize_position_embeddings", "lang", "dataset_name", "dataset_config_name",
        "text_column", "summary_column", "train_file", "validation_file", "test_file", "overwrite_cache",
        "preprocessing_num_workers", "max_source_length", "max_target_length", "val_max_target_length",
        "pad_to_max_length", "max_train_samples", "max_eval_samples", "max_predict_samples", "num_beams",
        "ignore_pad_token_for_loss", "source_prefix", "forced_bos_token",
    ),
    "run_translation": (
        "model_name_or_path", "config_name", "tokenizer_name", "cache_dir", "use_fast_tokenizer", "model_revision",
        "token", "trust_remote_code", "source_lang", "target_lang", "dataset_name", "dataset_config_name",
        "train_file", "validation_file", "test_file", "overwrite_cache", "preprocessing_num_workers",
        "max_source_length", "max_target_length", "val_max_target_length", "pad_to_max_length", "max_train_samples",
        "max_eval_samples", "max_predict_samples", "num_beams", "ignore_pad_token_for_loss", "source_prefix",
        "forced_bos_token",
    ),
    "run_image_classification": (
        "dataset_name", "dataset_config_name", "train_dir", "validation_dir", "train_val_split", "max_train_samples",
        "max_eval_samples", "image_column_name", "label_column_name", "model_name_or_path", "model_type",
        "config_name", "cache_dir", "model_revision", "image_processor_name", "token", "trust_remote_code",
        "ignore_mismatched_sizes",
    ),
}  # fmt: skip


# Training flags of transformers 4 that the example scripts' commands still use and transformers 5 dropped: renamed
# ones answer to their new name, and those whose behaviour is now the only one are accepted and change nothing.
RENAMED_TRAINING_FLAGS = {
    "evaluation_strategy": "eval_strategy",
    "no_cuda": "use_cpu",
    "per_gpu_train_batch_size": "per_device_train_batch_size",
    "per_gpu_eval_batch_size": "per_device_eval_batch_size",
}
OBSOLETE_TRAINING_FLAGS = {
    "overwrite_output_dir": "an existing --output_dir is always written over (transformers 5 dropped the flag; "
                            "--resume_from_checkpoint resumes a run)",
    "save_safetensors": "weights are always saved as safetensors (transformers 5 dropped the flag)",
}  # fmt: skip
REFUSED_FLAGS["logging_dir"] = "transformers 5 dropped it: the TENSORBOARD_LOGGING_DIR environment variable names it"


class ObsoleteFlag(argparse.Action):
    """A training flag of transformers 4 whose behaviour is transformers 5's only one: accepted (with or without a
    value), it changes nothing."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        return None


class RefusedFlag(argparse.Action):
    """A flag of transformers' example scripts that `aiayn train` refuses: an error that names it and says why."""

    def __init__(self, option_strings, dest, reason: str, **kwargs):
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)
        self.reason = reason

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is not supported: {self.reason}.")


class TrainingArguments(transformers.Seq2SeqTrainingArguments):
    """transformers' `Seq2SeqTrainingArguments`, as a group of flags of its own in `aiayn train TASK --help`."""

    _argument_group_name = "training (transformers' Seq2SeqTrainingArguments)"


def with_dashed_aliases(metadata) -> dict:
    """A field's metadata with each alias also in the spelling argparse gives its own flags, `--a-b` beside
    `--a_b`."""
    aliases = metadata.get("aliases", [])
    spelled = [spelling for alias in aliases for spelling in dict.fromkeys((alias, alias.replace("_", "-")))]
    return {**metadata, "aliases": spelled} if aliases else dict(metadata)


def task_arguments(task: str) -> tuple[type, type, type]:
    """The dataclasses of a task's flags: `ModelArguments`, the `DataArguments` fields the task reads with its
    defaults (a dataclass of its own, so that its help lists only those) and `TrainingArguments`."""
    definition = TASKS[task]
    wanted = (*COMMON_DATA_FIELDS, *definition.data_fields)
    data_fields = [(f.name, f.type, field(default=definition.defaults.get(f.name, f.default),
                                          metadata=with_dashed_aliases(f.metadata)))
                   for f in dataclasses.fields(DataArguments) if f.name in wanted]  # fmt: skip
    name = "".join(part.title() for part in task.split("-")) + "DataArguments"
    data_class = dataclasses.make_dataclass(name, data_fields, namespace={"_argument_group_name": "data"})
    return ModelArguments, data_class, TrainingArguments


def task_parser(task: str, **kwargs) -> transformers.HfArgumentParser:
    """The parser of `aiayn train TASK`: model, data and training flags in groups; the refused flags of the example
    scripts (`REFUSED_FLAGS`) and the data flags of other tasks are errors that name them."""
    parser = transformers.HfArgumentParser(task_arguments(task), **kwargs)
    refused = {**{name: reason for name, reason in REFUSED_FLAGS.items()},
               **{f.name: f"the {task} task does not read it" for f in dataclasses.fields(DataArguments)}}  # fmt: skip
    if TASKS[task].family == "vision":  # run_image_classification's name of a saved image processor
        group = next(group for group in parser._action_groups if group.title == ModelArguments._argument_group_name)
        group.add_argument(
            "--image_processor_name",
            "--image-processor-name",
            dest="tokenizer_name",
            type=str,
            default=argparse.SUPPRESS,
            help="A folder with a saved image processor: --tokenizer_name.",
        )
    else:
        refused["image_processor_name"] = f"the {task} task reads text: its tokenizer is --tokenizer_name"
    training = next(group for group in parser._action_groups
                    if group.title == TrainingArguments._argument_group_name)  # fmt: skip
    for old, new in RENAMED_TRAINING_FLAGS.items():
        target = parser._option_string_actions[f"--{new}"]
        training.add_argument(f"--{old}", f"--{old.replace('_', '-')}", dest=target.dest, type=target.type,
                              nargs=target.nargs, const=target.const, default=argparse.SUPPRESS,
                              help=f"transformers 4's name of --{new}.")  # fmt: skip
    for name, reason in OBSOLETE_TRAINING_FLAGS.items():
        training.add_argument(f"--{name}", f"--{name.replace('_', '-')}", action=ObsoleteFlag,
                              help=f"Accepted, and changes nothing: {reason}.")  # fmt: skip
    known = {option for action in parser._actions for option in action.option_strings}
    for name, reason in refused.items():
        options = [option for option in (f"--{name}", f"--{name.replace('_', '-')}") if option not in known]
        if options:
            parser.add_argument(*options, action=RefusedFlag, reason=reason)
    return parser
