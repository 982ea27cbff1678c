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
WHY: dict[str, str] = {}

# Kinds of survivor read once for all their mutants: a pattern of the mutated line (its "+" side) and why it
# survives.
KINDS = [
    (
        r'desc=("(XX)?[Tt]okenizing(XX)?"|"TOKENIZING"|"(XX)?[Pp]rocessing(XX)?"|"PROCESSING"|None)',
        "equivalent: the label of datasets' progress bar",
    ),
    (
        r"^\s*(description|citation|inputs_description)=",
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
        print(f"- `{name}` ({found[name]}): {why[name]}")
        print("  ```diff\n" + "\n".join(f"  {line}" for line in diffs[name]) + "\n  ```")


def changed_lines(name: str) -> list[str]:
    """The removed and added lines of a mutant's diff."""
    return [line for line in mutmut("show", name).splitlines() if re.match(r"^[-+](?![-+])", line)]


def kind_of(changed: list[str]) -> str:
    """The reason of the first kind (`KINDS`) whose pattern an added line matches, else "not yet read"."""
    added = [line[1:] for line in changed if line.startswith("+")]
    return next((reason for pattern, reason in KINDS if any(re.search(pattern, line) for line in added)),
                "not yet read")  # fmt: skip


if __name__ == "__main__":
    main()
