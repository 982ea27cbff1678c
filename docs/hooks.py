"""MkDocs hooks: the command-line reference and the flags of `aiayn train` are generated from `aiayn`'s own parsers,
so that they cannot drift; every name of transformers' API that the pages write as code links to its entry in
transformers' documentation, and so do the types of the reference's signatures and tables."""

import re

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


TRANSFORMERS_DOCS = "https://huggingface.co/docs/transformers/"
# The names of transformers' API the pages and docstrings write, by the page of transformers' documentation that
# documents them (each entry's anchor there is `transformers.<name>`).
TRANSFORMERS_PAGES = {
    "main_classes/model": (
        "PreTrainedModel", "PreTrainedModel.from_pretrained", "PreTrainedModel.save_pretrained",
        "PreTrainedModel.resize_token_embeddings", "PreTrainedModel.gradient_checkpointing_enable",
        "utils.PushToHubMixin.push_to_hub",
    ),
    "main_classes/configuration": ("PreTrainedConfig", "PreTrainedConfig.from_pretrained"),
    "main_classes/text_generation": ("GenerationConfig", "GenerationMixin", "GenerationMixin.generate"),
    "main_classes/trainer": ("Trainer", "Seq2SeqTrainer", "TrainingArguments", "Seq2SeqTrainingArguments"),
    "main_classes/pipelines": ("pipeline",),
    "main_classes/data_collator": (
        "DataCollatorForLanguageModeling", "DataCollatorForSeq2Seq", "DataCollatorWithPadding",
        "DataCollatorForTokenClassification",
    ),
    "main_classes/quantization": ("TorchAoConfig",),
    "internal/generation_utils": ("Cache", "DynamicCache", "StaticCache", "EncoderDecoderCache", "TextStreamer"),
    "model_doc/auto": (
        "AutoConfig", "AutoTokenizer", "AutoImageProcessor", "AutoModel", "AutoModelForCausalLM",
        "AutoModelForMaskedLM", "AutoModelForSeq2SeqLM", "AutoModelForSequenceClassification",
        "AutoModelForTokenClassification", "AutoModelForQuestionAnswering", "AutoModelForMultipleChoice",
        "AutoModelForImageClassification", "AutoModelForMaskedImageModeling",
    ),
    "model_doc/bert": ("BertConfig", "BertModel", "BertForMaskedLM", "BertForSequenceClassification"),
    "model_doc/gpt2": ("GPT2Config", "GPT2Model", "GPT2LMHeadModel"),
    "model_doc/t5": ("T5Config", "T5Model", "T5ForConditionalGeneration", "T5EncoderModel"),
    "model_doc/vit": ("ViTConfig", "ViTModel", "ViTForImageClassification", "ViTForMaskedImageModeling",
                      "ViTImageProcessor"),
    "model_doc/bart": ("BartModel", "BartForConditionalGeneration"),
    "model_doc/marian": ("MarianMTModel",),
    "model_doc/big_bird": ("BigBirdModel",),
    "model_doc/encoder-decoder": ("EncoderDecoderModel",),
    "model_doc/vision-encoder-decoder": ("VisionEncoderDecoderModel",),
}  # fmt: skip
# Methods the pages write without their class.
TRANSFORMERS_METHODS = {
    "from_pretrained": "PreTrainedModel.from_pretrained",
    "save_pretrained": "PreTrainedModel.save_pretrained",
    "push_to_hub": "utils.PushToHubMixin.push_to_hub",
    "generate": "GenerationMixin.generate",
}


def transformers_urls() -> dict[str, str]:
    """The documentation URL of each name of transformers' API the pages write, by each way they write it: `Name`,
    `transformers.Name`, the path of its module (`transformers.modeling_outputs.MaskedLMOutput`, as the reference's
    signatures name types), and a method with its class or alone (`from_pretrained()`)."""
    import importlib

    import aiayn  # noqa: F401  (first: it quiets what torchao logs when transformers' modeling code loads)

    from transformers import modeling_outputs  # isort: skip

    anchors = {name: page for page, names in TRANSFORMERS_PAGES.items() for name in names}
    anchors |= {name: "main_classes/output" for name in dir(modeling_outputs) if name.endswith("Output")}
    urls = {}
    for name, page in anchors.items():
        module = "transformers.modeling_outputs" if page == "main_classes/output" else "transformers"
        url = f"{TRANSFORMERS_DOCS}{page}#{module}.{name}"
        short = name.removeprefix("utils.")
        urls |= {short: url, f"{module}.{name}": url, f"transformers.{short}": url}
        owner, _, method = short.partition(".")
        # The API's classes also under the path of their module, as signatures name them (the models' pages are
        # linked by name only).
        target = None if page.startswith("model_doc/") else getattr(importlib.import_module(module), owner, None)
        if isinstance(target, type):
            urls[".".join(filter(None, (target.__module__, target.__qualname__, method)))] = url
    for method, name in TRANSFORMERS_METHODS.items():
        urls[method] = urls[name.removeprefix("utils.")]
    return urls


URLS: dict[str, str] = {}
# Links and preformatted blocks, which keep their text; the code spans between them may become links.
KEPT = re.compile(r"<a\b.*?</a>|<pre\b.*?</pre>|<h\d\b.*?</h\d>", re.DOTALL)
# A name, a dotted name, or a call of one (`pipeline("translation", model=folder)`, `model.generate(...)`).
CODE = re.compile(r"<code>([\w.]+)(\([^<]*\))?</code>")


def on_config(config):
    """Registers the URL of each name of transformers' API with autorefs, which links the reference's types."""
    URLS.update(transformers_urls())
    autorefs = config.plugins["autorefs"]
    for identifier, url in URLS.items():
        if "." in identifier:
            autorefs.register_url(identifier, url)
    return config


def _linked(match: re.Match) -> str:
    """The code span, linked where it names transformers' API, or calls a method of it on `model`."""
    name = match[1].removeprefix("model.") if match[1].removeprefix("model.") in TRANSFORMERS_METHODS else match[1]
    url = URLS.get(name)
    return f'<a href="{url}">{match[0]}</a>' if url else match[0]


TABLE = re.compile(r"<table\b.*?</table>", re.DOTALL)
HEADER_CELL = re.compile(r"<th\b[^>]*>(.*?)</th>", re.DOTALL)
ROW = re.compile(r"<tr\b.*?</tr>", re.DOTALL)


def _labelled_cells(table: re.Match) -> str:
    """The table, each body cell with the header of its column as `data-label`, which narrow screens show before
    the cell when they stack a row's cells (extra.css)."""
    labels = [re.sub(r"<[^>]+>", "", header).strip() for header in HEADER_CELL.findall(table[0])]

    def label_row(row: re.Match) -> str:
        cells = iter(labels)
        return re.sub(r"<td\b", lambda cell: f'<td data-label="{next(cells, "")}"', row[0])

    return ROW.sub(label_row, table[0])


def _with_links(html: str) -> str:
    """Each code span that names transformers' API (`PreTrainedModel`, `generate()`) links to its documentation,
    but for those inside links, headings and code blocks."""
    pieces = []
    end = 0
    for kept in KEPT.finditer(html):
        pieces += [CODE.sub(_linked, html[end : kept.start()]), kept[0]]
        end = kept.end()
    pieces.append(CODE.sub(_linked, html[end:]))
    return "".join(pieces)


ANCHOR_LINK = re.compile(r'href="#([^"]+?)--([^"]+)"')


def _anchors_kept(html: str) -> str:
    """Links to another entry of the page as the docstring wrote them: mkdocstrings prefixes a docstring's `#anchor`
    links with its object's id (`#A--anchor`, for the ids it prefixes likewise), which misses an anchor of another
    object (a config's field table links to the fields of its bases)."""
    ids = set(re.findall(r'\bid="([^"]+)"', html))

    def kept(link: re.Match) -> str:
        prefixed = f"{link[1]}--{link[2]}"
        return link[0] if prefixed in ids or link[2] not in ids else f'href="#{link[2]}"'

    return ANCHOR_LINK.sub(kept, html)


def on_page_content(html: str, page, config, files) -> str:
    return TABLE.sub(_labelled_cells, _with_links(_anchors_kept(html)))


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, command_line_reference())
    if TRAIN_MARKER in markdown:
        return markdown.replace(TRAIN_MARKER, train_reference())
    return markdown
