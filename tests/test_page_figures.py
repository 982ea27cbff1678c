"""The figures the pages cite from elsewhere, held equal to their source: the demo's sizes and steps to its code
(`aiayn.experiments.demo`), its results to its results page (docs/results/demo.md), the task scripts of `aiayn train
--help` to the how-to's table, and the attention backends of the README and the Models index to what the models
declare. Each test writes the page's sentence from the source's values and finds it on the page."""

import re
from pathlib import Path

from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from aiayn.attention_variants_aiayn import backend_kind
from aiayn.experiments.demo import FULL, GENRE_DROPOUT
from aiayn.modeling_aiayn import AiaynPreTrainedModel
from aiayn.training import TASKS, parse_overrides

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
RESULTS = (DOCS / "results" / "demo.md").read_text()
# The kinds of attention backend beside eager (`backend_kind`), each with the flag by which a model declares it.
BACKEND_FLAGS = {
    "sdpa": "_supports_sdpa",
    "flex_attention": "_supports_flex_attn",
    "flash_attention": "_supports_flash_attn",
}


def prose(path: Path) -> str:
    """The page's text with every run of white space one space, as the sentences read across line breaks."""
    return " ".join(path.read_text().split())


def demo_run(name: str):
    return next(run for run in FULL if run.name == name)


def demo_summary() -> dict[str, dict[str, tuple[str, str]]]:
    """The table of the results page's summary (from its header to the first blank line), read by the header's
    columns: {run: {metric: (value, baseline)}}, with the run's steps under "steps"."""
    summary = RESULTS[RESULTS.index("=== summary") :].split("\n\n")[0].splitlines()
    header = summary[1]
    columns = [header.index(name) for name in ("params", "steps", "train s", "metric", "value", "baseline")]
    params, steps, train, metric, value, baseline = columns
    rows, run = {}, None
    for line in summary[2:]:
        if not line.startswith(" "):
            run = line[:params].strip()
            rows[run] = {"steps": (line[steps:train].strip(), "")}
        rows[run][line[metric:value].strip()] = (line[value:baseline].strip(), line[baseline:].strip())
    return rows


def fill_mask_answer(prompt: str) -> str:
    """The answers the demo's masked LM gives to `prompt` ("after", in the results page's table)."""
    row = next(line for line in RESULTS.splitlines() if line.startswith(f'| fill-mask: "{prompt}"'))
    return row.split("|")[3].strip()


def test_the_results_page_summarises_the_demos_runs_at_their_steps():
    summary = demo_summary()
    assert {name: int(summary[name]["steps"][0]) for name in summary} == {run.name: run.steps for run in FULL}


def test_the_encoder_tutorial_cites_the_demos_masked_lm_and_classifier():
    page, summary = prose(DOCS / "tutorials" / "encoder.md"), demo_summary()
    bert, genre = demo_run("bert-shakespeare"), demo_run("genre-finetuned")
    width = parse_overrides(bert.overrides)["d_model"]
    loss, loss_baseline = summary["bert-shakespeare"]["val loss"]
    accuracy, accuracy_baseline = summary["bert-shakespeare"]["accuracy"]
    genre_accuracy, majority = summary["genre-finetuned"]["accuracy"]
    answer = fill_mask_answer("To be, or not to be, that is the [MASK].")
    dropout = parse_overrides(GENRE_DROPOUT)["dropout"]
    assert genre.fine_tuning_overrides == GENRE_DROPOUT
    for sentence in (
        f"The demo's encoder (`make demo`) is {width} wide with a {bert.vocab_size}-token vocabulary and pretrains "
        f"for {bert.steps} steps of {bert.batch_size} blocks of {bert.length} tokens",
        f"the demo's model answers `{answer}`",
        f"compare its accuracy with the majority class, histories, which is {float(majority):.1%} of the held-out",
        f"The demo fine-tunes for {genre.steps} steps with dropout {dropout}: the classifier fine-tuned from its "
        f"masked LM ends at {genre_accuracy}, the same architecture from scratch at the majority class",
        f"the demo's reaches a loss of {loss} and an accuracy of {accuracy} against the baseline's {loss_baseline} "
        f"and {accuracy_baseline}, and the genre classifier fine-tuned from it {genre_accuracy} against the "
        f"majority's {majority}",
    ):
        assert sentence in page, sentence
    assert summary["genre-from-scratch"]["accuracy"] == (majority, majority)


def test_the_decoder_tutorial_cites_the_demos_language_model():
    gpt = demo_run("gpt-shakespeare")
    fields = parse_overrides(gpt.overrides)
    sentence = (f"The demo's model (`make demo`) is {fields['d_model']} wide with {fields['num_layers']} layers and "
                f"trains {gpt.steps} steps of {gpt.batch_size} blocks of {gpt.length} tokens")  # fmt: skip
    assert sentence in prose(DOCS / "tutorials" / "decoder.md")


def test_the_seq2seq_tutorial_cites_the_demos_translation_model():
    page = prose(DOCS / "tutorials" / "seq2seq.md")
    translation = demo_run("transformer-en-de")
    fields = parse_overrides(translation.overrides)
    bleu = demo_summary()["transformer-en-de"]["BLEU"][0]
    for sentence in (
        f"The demo (`make demo`) trains width {fields['d_model']}, {fields['num_layers']} + "
        f"{fields['num_decoder_layers']} layers, for {translation.steps} steps of {translation.batch_size} pairs, "
        f"and reaches BLEU {bleu} on held-out chapters",
        f"the demo's {translation.steps} steps take `PaperRecipe(warmup_steps={translation.warmup_steps}, "
        f"peak_learning_rate={translation.learning_rate!r})`",
        f"as the demo's {translation.steps} steps do (BLEU {bleu},",
    ):
        assert sentence in page, sentence
    assert translation.paper_recipe


def test_the_vision_tutorial_cites_the_demos_image_models():
    page, summary = prose(DOCS / "tutorials" / "vision.md"), demo_summary()
    classifier = demo_run("vit-digits")
    patch = parse_overrides(classifier.overrides)["patch_size"]
    grid = parse_overrides(classifier.overrides)["image_size"] // patch
    pretrained = summary["vit-100-labels-pretrained"]["accuracy"][0]
    from_scratch = summary["vit-100-labels-from-scratch"]["accuracy"][0]
    for sentence in (
        f"The demo (`make demo`) reads the same images in patches of {patch} (a grid of {grid} x {grid}) and trains "
        f"for {classifier.steps} steps",
        f"The demo's {classifier.steps} steps in patches of {patch} reach {summary['vit-digits']['accuracy'][0]}, "
        f"below a logistic regression on the same pixels ({summary['vit-digits']['linear, pixels'][0]})",
        f"then fine-tuning on {demo_run('vit-100-labels-pretrained').train_samples} labelled images, reaches "
        f"{pretrained} accuracy, against {from_scratch} for the same architecture",
    ):
        assert sentence in page, sentence


def test_the_train_help_and_the_how_to_name_each_tasks_script():
    """`aiayn train --help` shows each task's help, which names the example script the task follows; the how-to's
    table names the same script."""
    table = dict(re.findall(r"^\| `([\w-]+)` \| `(\w+)` \|", (DOCS / "how-to" / "train.md").read_text(), re.MULTILINE))
    assert table == {name: task.script for name, task in TASKS.items()}
    assert {name: task.help.endswith(f"({task.script})") for name, task in TASKS.items()} == dict.fromkeys(TASKS, True)


def backends_named(line: str) -> set[str]:
    return set(re.findall(r"`(eager|sdpa|flex_attention|flash_attention_\d)`", line))


def test_the_readme_and_the_models_index_name_the_attention_backends_the_models_declare():
    declared = {"eager"} | {kind for kind, flag in BACKEND_FLAGS.items() if getattr(AiaynPreTrainedModel, flag)}
    readme = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| attention |"))
    models = (DOCS / "reference" / "models" / "index.md").read_text()
    models = " ".join(models[models.index("`set_attn_implementation`") :].split(";")[0].split())
    assert backends_named(readme) == backends_named(models)
    assert {backend_kind(name) for name in backends_named(readme)} == declared
    assert backends_named(readme) - {"eager"} <= set(ALL_ATTENTION_FUNCTIONS.valid_keys())  # names transformers takes
