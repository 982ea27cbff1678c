"""The `aiayn` command line."""

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers

from .configuration_aiayn import PRESETS, preset_config
from .extras import MissingExtra
from .families import FAMILIES, family_of


def count_parameters(config) -> int:
    """Parameters of the family's language-model head for `config`, counted without allocating them."""
    with torch.device("meta"):
        auto_class = getattr(transformers, FAMILIES[family_of(config.model_type)].pretraining_auto_class)
        model = auto_class.from_config(config)
    return sum(p.numel() for p in model.parameters())


def presets_table() -> str:
    columns = ("preset", "family", "vocab", "d_model", "heads", "d_ff", "layers", "positions", "norm", "params")
    rows = []
    for name, (family, _) in PRESETS.items():
        config = preset_config(name)
        layers = str(config.num_layers)
        if family == "seq2seq":
            layers += f"+{config.num_decoder_layers}"
        norm = ("pre-" if config.norm_first else "post-") + config.norm_type
        vocab = "-" if family == "vision" else str(config.vocab_size)  # images have pixels, not a vocabulary
        rows.append(
            (name, family, vocab, str(config.d_model), str(config.num_heads), str(config.d_ff),
             layers, config.position_embedding_type, norm, f"{count_parameters(config) / 1e6:.1f}M")
        )  # fmt: skip
    widths = [max(len(row[i]) for row in (columns, *rows)) for i in range(len(columns))]
    lines = ("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in (columns, *rows))
    return "\n".join(line.rstrip() for line in lines)


class UsageError(Exception):
    """A command's arguments cannot be carried out; `main` exits with status 2 and the message, without a traceback."""


def write_hub_folder(args: argparse.Namespace) -> None:
    """`aiayn hub-folder`: reloads a saved model with its head class and writes it with its card; the evaluation
    results and training arguments a training run left next to it (all_results.json, training_args.json) go into
    the card."""
    import json
    import os

    import aiayn

    from .hub import save_hub_folder

    with open(os.path.join(args.source, "config.json")) as f:
        architecture = (json.load(f).get("architectures") or [""])[0]
    model_class = getattr(aiayn, architecture, None)
    if model_class is None:
        raise UsageError(f"{args.source} does not hold an aiayn model ({architecture!r}).")
    model = model_class.from_pretrained(args.source)
    vision = model.config.model_type == "aiayn_vision"
    processor_class = transformers.AutoImageProcessor if vision else transformers.AutoTokenizer
    processor = processor_class.from_pretrained(args.source)
    recorded = {}
    for key, name in (("metrics", "all_results.json"), ("training_arguments", "training_args.json")):
        if os.path.isfile(os.path.join(args.source, name)):
            with open(os.path.join(args.source, name)) as f:
                recorded[key] = json.load(f)
    card = save_hub_folder(
        model, processor, args.destination, repo_id=args.repo_id, task=args.task, datasets=args.dataset,
        language=args.language or None, license=args.license, headline=headline_of(model, args.task), **recorded,
    )  # fmt: skip
    print(f"wrote {args.destination} ({card.data.pipeline_tag}, {len(card.data.eval_results or [])} results)")


def headline_of(model, task: str | None) -> tuple[str, ...] | None:
    """The verdict metrics of the `aiayn train` task whose folders serve the pipeline `task` (by default the head's),
    where one task does; else None (every metric with a baseline)."""
    from .hub import HEADS, head_of
    from .tasks import TASKS

    task = task or HEADS[head_of(model)][0]
    headlines = {definition.headline for definition in TASKS.values() if definition.pipeline_task == task}
    return headlines.pop() if len(headlines) == 1 else None


def train(args: argparse.Namespace) -> None:
    """`aiayn train TASK FLAGS`: the task's run (`aiayn.training.main`); `aiayn train --help` lists the tasks,
    `aiayn train TASK --help` the task's flags."""
    from .training import TASKS
    from .training import main as run_task

    parser = build_parser()._subparsers._group_actions[0].choices["train"]
    if not args.arguments or args.arguments[0] in ("-h", "--help"):
        parser.print_help()
        parser.exit(0 if args.arguments else 2)
    task, *flags = args.arguments
    if task not in TASKS:
        raise UsageError(f"unknown task {task!r}; the tasks are {', '.join(TASKS)}")
    try:
        run_task(task, flags)
    except (ValueError, MissingExtra) as error:
        raise UsageError(error) from error


def _train_arguments(parser: argparse.ArgumentParser) -> None:
    """A subparser per task, each the task's own parser (`aiayn.training.task_parser`): its help lists the task's
    flags in groups (model, data, training)."""
    from .training import TASKS, task_parser

    parser.usage = "aiayn train TASK [FLAGS]"
    parser.description = (
        "Train a model on your data (csv, json, jsonl, txt or parquet files, image folders, datasets saved with "
        "save_to_disk, or the bundled corpora), evaluate it beside a baseline that learns nothing, and save it with "
        "its card. `aiayn train TASK --help` lists a task's flags; the names of transformers' example scripts "
        "(--train_file, --text_column_name, --max_seq_length, ...) work too."
    )
    tasks = parser.add_subparsers(dest="task", metavar="TASK", title="tasks",
                                  parser_class=lambda task, **kwargs: task_parser(task, **kwargs))  # fmt: skip
    for name, task in TASKS.items():
        tasks.add_parser(name, task=name, help=task.help, description=task.help, usage=f"aiayn train {name} [FLAGS]")


def serve(args: argparse.Namespace) -> None:
    """`aiayn serve ARGS`: `transformers serve ARGS`, transformers' own OpenAI-compatible server, in a process where
    aiayn's model classes resolve. The server loads a model through the class its config's `architectures` names,
    looked up on the `transformers` module itself (`cli/serving/model_manager.py`), where a model class from outside
    transformers is not, whether loaded with `--trust-remote-code` or not; this names aiayn's classes there."""
    from transformers.cli.transformers import app

    name_model_classes_in_transformers()
    app(["serve", *args.arguments], prog_name="aiayn")


def name_model_classes_in_transformers() -> None:
    """aiayn's model classes as attributes of the `transformers` module, where `transformers serve` looks them up."""
    import aiayn

    for name in aiayn.__all__:
        value = getattr(aiayn, name)
        if isinstance(value, type) and issubclass(value, transformers.PreTrainedModel):
            setattr(transformers, name, value)


if "__mp_main__" in sys.modules:
    # A process that multiprocessing spawned from `aiayn`, such as the one in which `transformers serve` loads the
    # model: it imports this module again rather than running `serve`, and looks the classes up there.
    name_model_classes_in_transformers()


def print_presets(args: argparse.Namespace) -> None:
    print(presets_table())


def convert(args: argparse.Namespace) -> None:
    from .conversion import convert_checkpoint

    try:
        model = convert_checkpoint(args.source, args.destination, allow_pickle=args.allow_pickle)
    except ValueError as error:
        raise UsageError(error) from error
    print(f"wrote {type(model).__name__} to {args.destination}")


def export(args: argparse.Namespace) -> None:
    from .ctranslate2_export import export_ctranslate2

    try:
        export_ctranslate2(args.source, args.destination, args.quantization, args.force, args.max_positions)
    except (ValueError, FileExistsError, ImportError) as error:
        raise UsageError(error) from error
    print(f"wrote the CTranslate2 model ({args.quantization}) of {args.source} to {args.destination}")


def average(args: argparse.Namespace) -> None:
    from .averaging import average_checkpoints, checkpoint_folders

    if bool(args.run_dir) == bool(args.checkpoints):
        raise UsageError("give either checkpoint folders or --run-dir, not both")
    try:
        folders = checkpoint_folders(args.run_dir, args.last) if args.run_dir else args.checkpoints
        average_checkpoints(folders, args.output, allow_pickle=args.allow_pickle)
    except ValueError as error:
        raise UsageError(error) from error
    print(f"averaged {len(folders)} checkpoints into {args.output}")


def demo(args: argparse.Namespace) -> None:
    from .experiments.demo import main as run_demo

    run_demo(args.out, quick=args.quick, threads=args.threads)


def ablate(args: argparse.Namespace) -> None:
    from .experiments.ablation import Budget, ablate

    ablate(args.out, tuple(args.rows), Budget.parse(args.budget), args.seeds, args.eval_samples,
           args.train_samples, use_cpu=args.device == "cpu")  # fmt: skip


def versus_marian(args: argparse.Namespace) -> None:
    from .experiments.ablation import versus_marian

    versus_marian(args.out, args.steps, args.seeds, args.eval_samples, args.train_samples,
                  use_cpu=args.device == "cpu")  # fmt: skip


def long_inputs(args: argparse.Namespace) -> None:
    from .experiments.long_inputs import main as run_long_inputs

    run_long_inputs(args.out, quick=args.quick, threads=args.threads)


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def _convert_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="folder written by save_pretrained (model, and tokenizer if any)")
    parser.add_argument("destination", help="folder to write the aiayn model and tokenizer to")
    parser.add_argument(
        "--allow-pickle", action="store_true", help="also read pytorch_model.bin (with torch.load(weights_only=True))"
    )


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    from .ctranslate2_export import QUANTIZATIONS

    parser.add_argument("format", choices=["ctranslate2"], help="the inference engine to export to")
    parser.add_argument("source", help="a saved aiayn folder with its tokenizer (seq2seq, decoder or encoder)")
    parser.add_argument("destination", help="the engine's model folder to write")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default="float32", help="the weights' type")
    parser.add_argument("--force", action="store_true", help="replace the destination if it exists")
    parser.add_argument(
        "--max-positions", type=int, help="rows of the written sinusoid table (default: max_position_embeddings)"
    )


def _average_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", help="folder to write the averaged model to")
    parser.add_argument("checkpoints", nargs="*", help="checkpoint folders, oldest first")
    parser.add_argument("--run-dir", help="a Trainer output folder whose checkpoint-<step> folders to average")
    parser.add_argument("--last", type=int, default=5, help="with --run-dir: how many of the latest checkpoints")
    parser.add_argument("--allow-pickle", action="store_true", help="also read pytorch_model.bin (weights only)")


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="runs/demo", help="folder for the trained models, plots and summary")
    parser.add_argument("--quick", action="store_true", help="the same stages with smaller models and fewer steps")
    _threads_argument(parser)


def _ablate_arguments(parser: argparse.ArgumentParser) -> None:
    from .experiments.ablation import ROWS, TABLE_3_ROWS

    parser.add_argument("--out", default="runs/ablate", help="folder for the runs, the table, the JSON and the plot")
    parser.add_argument(
        "--rows", nargs="+", default=list(TABLE_3_ROWS), choices=ROWS,
        help="Table 3's rows A-E (the default), and S: unscaled dot products, scaled dot products and additive "
        "attention scores at d_k 32, 64, 128 and 256 (one head), with the attention logits' spread, entropy and "
        "gradient at initialisation and after training (section 3.2.1)",
    )  # fmt: skip
    parser.add_argument("--budget", default="60", help="per run: seconds ('60', '60s') or steps ('500steps')")
    parser.add_argument("--seeds", type=int, default=1, help="runs per variant, with seeds 0, 1, ...")
    parser.add_argument("--eval-samples", type=int, default=300, help="validation verses scored")
    parser.add_argument("--train-samples", type=int, help="train on only this many verses (default: all)")
    parser.add_argument("--device", choices=["auto", "cpu"], default="auto", help="auto: an accelerator if present")


def _versus_marian_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="runs/versus-marian", help="folder for the runs, the table and the JSON")
    parser.add_argument("--steps", type=int, default=1000, help="training steps of every run")
    parser.add_argument("--seeds", type=int, default=3, help="runs per model, with seeds 0, 1, ...")
    parser.add_argument("--eval-samples", type=int, default=300, help="validation verses scored")
    parser.add_argument("--train-samples", type=int, help="train on only this many verses (default: all)")
    parser.add_argument("--device", choices=["auto", "cpu"], default="auto", help="auto: an accelerator if present")


def _long_inputs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="runs/long-inputs", help="folder for the runs, the table and the JSON")
    parser.add_argument("--quick", action="store_true", help="a small model, short blocks and few steps")
    _threads_argument(parser)


def _threads_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads", type=int, default=None,
        help="torch threads (default: one per core); fewer leave cores to other jobs, as the test suite's workers",
    )  # fmt: skip


def _hub_folder_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a folder saved by save_pretrained with its tokenizer (e.g. a training run)")
    parser.add_argument("destination", help="the folder to write")
    parser.add_argument("--repo-id", help="the hub repository the card names (default: the destination's name)")
    parser.add_argument("--task", help="the pipeline tag (default: the model head's)")
    parser.add_argument("--dataset", action="append", default=[], help="training data (repeatable)")
    parser.add_argument("--language", action="append", default=[], help="language code (repeatable)")
    parser.add_argument("--license", default="apache-2.0", help="the card's license (default: apache-2.0)")


@dataclass(frozen=True)
class Command:
    """A subcommand: its help line, what adds its arguments to its parser, and what runs it on the parsed arguments.
    A command that `passes_arguments` hands every later argument, unparsed, to the program it wraps (`arguments`)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], None]
    passes_arguments: bool = False


COMMANDS = {
    "train": Command(
        "train, evaluate beside a baseline that learns nothing, and save a model on your data: one task per head",
        _train_arguments, train, passes_arguments=True,
    ),
    "serve": Command(
        "transformers serve (an OpenAI-compatible server) for aiayn models; takes its arguments",
        _no_arguments, serve, passes_arguments=True,
    ),
    "presets": Command("list the preset configurations with their sizes", _no_arguments, print_presets),
    "convert": Command(
        "convert a BERT, GPT-2, T5, BART or ViT folder saved by transformers into an aiayn folder",
        _convert_arguments, convert,
    ),
    "export": Command(
        "export a saved folder to an inference engine: CTranslate2 (Translator, Generator, Encoder)",
        _export_arguments, export,
    ),
    "average": Command(
        "average the weights of checkpoints (the paper averages the last 5 or 20)", _average_arguments, average
    ),
    "demo": Command(
        "train, evaluate and save the four families on real text and images (make demo)", _demo_arguments, demo
    ),
    "ablate": Command(
        "train rows of the paper's Table 3 on the bundled En-De verses", _ablate_arguments, ablate
    ),
    "versus-marian": Command(
        "aiayn and transformers' MarianMTModel, same architecture, data, recipe and steps",
        _versus_marian_arguments, versus_marian,
    ),
    "long-inputs": Command(
        "a sliding-window GPT-style model on 16384-token blocks of Shakespeare beside full attention",
        _long_inputs_arguments, long_inputs,
    ),
    "hub-folder": Command(
        "write a hub-ready folder (model, tokenizer, code, card)", _hub_folder_arguments, write_hub_folder
    ),
}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The `aiayn` parser, a subparser per entry of `COMMANDS`."""
    parser = argparse.ArgumentParser(prog="aiayn", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        command.add_arguments(subparsers.add_parser(name, help=command.help, add_help=not command.passes_arguments))
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if argv and argv[0] in COMMANDS and COMMANDS[argv[0]].passes_arguments:
        args = argparse.Namespace(command=argv[0], arguments=argv[1:])
    else:
        args = parser.parse_args(argv)
    try:
        COMMANDS[args.command].run(args)
    except UsageError as error:
        parser.exit(2, f"aiayn {args.command}: error: {error}\n")


if __name__ == "__main__":
    main()
