"""MkDocs hooks: the command-line reference and the flags of `aiayn train` are generated from `aiayn`'s own parsers,
so that they cannot drift."""

MARKER = "<!-- aiayn-cli -->"
TRAIN_MARKER = "<!-- aiayn-train -->"


def command_line_reference() -> str:
    """Each `aiayn` command's `--help`, as the parser prints it."""
    from aiayn.cli import COMMANDS, build_parser

    parser = build_parser()
    subparsers = next(action for action in parser._actions if action.choices and isinstance(action.choices, dict))
    sections = [f"```text\n{parser.format_help()}```"]
    for name, command in COMMANDS.items():
        usage = subparsers.choices[name].format_help()
        sections.append(f"## `aiayn {name}`\n\n{command.help}.\n\n```text\n{usage}```")
    return "\n\n".join(sections)


TRAINING_ARGUMENTS = (
    "https://huggingface.co/docs/transformers/main_classes/trainer#transformers.Seq2SeqTrainingArguments"
)


def _cell(text: str) -> str:
    """Text for a Markdown table cell: flags as code, pipes escaped, on one line."""
    import re

    text = " ".join(str(text).split()).replace("|", "\\|")
    return re.sub(r"(?<![\w`])(--[a-z][a-z0-9_]*)", r"`\1`", text)


def _type_name(annotation) -> str:
    import types
    import typing

    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return " or ".join(_type_name(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    return getattr(annotation, "__name__", str(annotation))


def _options(action) -> str:
    """An action's flags: the field's name first, then its aliases (the dashed spellings left out)."""
    names = [option for option in action.option_strings if "-" not in option[2:]]
    return ", ".join(f"`{name}`" for name in names)


def _flag_rows(parser, dataclass, names, anchor: str, defaults=None) -> list[str]:
    """A table row per field of `dataclass` named in `names`: its flags (an anchor `anchor-name`), type, default (or
    `defaults[name]`) and help, as the parser has them."""
    import dataclasses

    rows = ["| Flag | Type | Default | Meaning |", "| --- | --- | --- | --- |"]
    for field in dataclasses.fields(dataclass):
        if field.name not in names:
            continue
        action = parser._option_string_actions[f"--{field.name}"]
        flags = _options(action)
        negation = parser._option_string_actions.get(f"--no_{field.name}")
        if negation is not None:
            flags += f" (off: `--no_{field.name}`)"
        default = defaults[field.name] if defaults and field.name in defaults else f"`{field.default!r}`"
        rows.append(f'| <a id="{anchor}-{field.name}"></a>{flags} | {_type_name(field.type)} | {default} | '
                    f"{_cell(action.help)} |")  # fmt: skip
    return rows


def _extra_actions(parser, fields: set[str]) -> list:
    """The flags a task's parser adds for a field beside the field's own (`--image_processor_name` of the image
    tasks, for `tokenizer_name`)."""
    from aiayn.train_arguments import RefusedFlag

    return [action for action in parser._actions
            if action.dest in fields and action.option_strings and not isinstance(action, RefusedFlag)
            and action is not parser._option_string_actions.get(f"--{action.dest}")
            and not action.option_strings[0].startswith("--no_")]  # fmt: skip


def _extra_rows(task: str, parser, fields: set[str]) -> list[str]:
    return [f'| <a id="{task}-{action.option_strings[0][2:]}"></a>{_options(action)} | {_type_name(action.type)} | '
            f"`None` | {_cell(action.help)} |" for action in _extra_actions(parser, fields)]  # fmt: skip


def train_reference() -> str:
    """Tables of the flags of `aiayn train`: the model flags and the data flags of every task once, then each task's
    own data flags, then each flag of transformers' example scripts, accepted (with its meaning) or refused (with
    the reason)."""
    import dataclasses

    from aiayn.tasks import TASKS
    from aiayn.train_arguments import (
        COMMON_DATA_FIELDS,
        EXAMPLE_SCRIPT_FLAGS,
        OBSOLETE_TRAINING_FLAGS,
        REFUSED_FLAGS,
        RENAMED_TRAINING_FLAGS,
        DataArguments,
        ModelArguments,
        RefusedFlag,
        task_arguments,
        task_parser,
    )

    parsers = {name: task_parser(name) for name in TASKS}
    first = parsers[next(iter(TASKS))]
    model_fields = {field.name for field in dataclasses.fields(ModelArguments)}
    common_defaults = {}
    for field in dataclasses.fields(DataArguments):
        if field.name in COMMON_DATA_FIELDS:
            own = [f"{name}: `{task.defaults[field.name]!r}`" for name, task in TASKS.items()
                   if field.name in task.defaults]  # fmt: skip
            common_defaults[field.name] = f"`{field.default!r}`" + (f" ({', '.join(own)})" if own else "")
    sections = [
        "## Flags of every task",
        f"Every task also takes transformers' training flags (`--output_dir`, `--learning_rate`, "
        f"`--num_train_epochs`, `--do_train`, `--do_eval`, `--do_predict`, ...): see "
        f"[`Seq2SeqTrainingArguments`]({TRAINING_ARGUMENTS}).",
        "### Model flags",
        "\n".join(_flag_rows(first, ModelArguments, model_fields, "flag")),
        "### Data flags of every task",
        "\n".join(_flag_rows(first, DataArguments, set(COMMON_DATA_FIELDS), "flag", common_defaults)),
    ]
    for name, task in TASKS.items():
        data_class = task_arguments(name)[1]
        own = set(task.data_fields) - set(COMMON_DATA_FIELDS)
        fields = model_fields | {field.name for field in dataclasses.fields(data_class)}
        usual = {role: " or ".join(f"`{column!r}`" for column in columns) for role, columns in task.columns.items()
                 if getattr(DataArguments, role, None) is None}  # fmt: skip
        rows = _flag_rows(parsers[name], data_class, own, name, usual) + _extra_rows(name, parsers[name], fields)
        body = "\n".join(rows) if len(rows) > 2 else "No data flags of its own."
        sections.append(f"## `{name}`\n\n{task.help[0].upper()}{task.help[1:]}.\n\n{body}")
    sections.append(
        "## Flags of transformers' example scripts\n\nEach flag of the example scripts of transformers v5.8 (their "
        "argument dataclasses; the training flags are transformers' own) is a flag of the matching task, with its "
        "meaning, or refused by name with the reason."
    )
    for script, flags in EXAMPLE_SCRIPT_FLAGS.items():
        task = next(name for name, definition in TASKS.items() if definition.script == script)
        parser, shared = parsers[task], model_fields | set(COMMON_DATA_FIELDS)
        extra = {action.option_strings[0][2:] for action in _extra_actions(parser, shared)}
        rows = ["| Flag | Accepted or refused | Meaning or reason |", "| --- | --- | --- |"]
        for flag in flags:
            action = parser._option_string_actions.get(f"--{flag}")
            if action is None or isinstance(action, RefusedFlag):
                rows.append(f'| <a id="{script}-{flag}"></a>`--{flag}` | refused | {_cell(REFUSED_FLAGS[flag])}. |')
                continue
            own_action = flag in extra
            section = task if own_action or action.dest not in shared else "flag"
            name = flag if own_action else action.dest
            rows.append(f'| <a id="{script}-{flag}"></a>`--{flag}` | accepted: [`--{name}`](#{section}-{name}) | '
                        f"{_cell(action.help)} |")  # fmt: skip
        sections.append(f"### `{script}` ({task})\n\n" + "\n".join(rows))
    rows = ["| Flag | Accepted or refused | Meaning or reason |", "| --- | --- | --- |"]
    rows += [f'| <a id="transformers-4-{old}"></a>`--{old}` | accepted: `--{new}` | transformers 4\'s name of '
             f"`--{new}`. |" for old, new in RENAMED_TRAINING_FLAGS.items()]  # fmt: skip
    rows += [f'| <a id="transformers-4-{flag}"></a>`--{flag}` | accepted, changes nothing | {_cell(reason)}. |'
             for flag, reason in OBSOLETE_TRAINING_FLAGS.items()]  # fmt: skip
    rows.append(f'| <a id="transformers-4-logging_dir"></a>`--logging_dir` | refused | '
                f"{_cell(REFUSED_FLAGS['logging_dir'])}. |")  # fmt: skip
    sections.append(
        "### Training flags of transformers 4\n\nCommands written for the scripts before transformers 5 use training "
        "flags it dropped: each is taken under its new name, accepted where its behaviour is now the only one, or "
        "refused with the reason.\n\n" + "\n".join(rows)
    )
    return "\n\n".join(sections)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, command_line_reference())
    if TRAIN_MARKER in markdown:
        return markdown.replace(TRAIN_MARKER, train_reference())
    return markdown
