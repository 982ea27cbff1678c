"""MkDocs hooks: the command-line reference is generated from `aiayn`'s own parser, so that it cannot drift."""

MARKER = "<!-- aiayn-cli -->"


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


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, command_line_reference())
    return markdown
