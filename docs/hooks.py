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


def train_reference() -> str:
    """Each task's model and data flags, then the training flags all tasks share, as their parsers print them."""
    import transformers

    from aiayn.training import TASKS, task_arguments

    sections = []
    for name, task in TASKS.items():
        model_arguments, data_arguments, _ = task_arguments(name)
        usage = f"aiayn train {name} [FLAGS]"
        parser = transformers.HfArgumentParser((model_arguments, data_arguments), prog=usage, usage=usage)
        sections.append(f"## `{name}`\n\n{task.help}.\n\n```text\n{parser.format_help()}```")
    training_arguments = task_arguments(next(iter(TASKS)))[2]
    usage = "aiayn train TASK [FLAGS]"
    parser = transformers.HfArgumentParser((training_arguments,), prog=usage, usage=usage)
    sections.append(f"## Training flags of every task\n\n```text\n{parser.format_help()}```")
    return "\n\n".join(sections)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, command_line_reference())
    if TRAIN_MARKER in markdown:
        return markdown.replace(TRAIN_MARKER, train_reference())
    return markdown
