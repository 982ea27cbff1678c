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
    if not found:
        raise SystemExit('No mutation results: run "make mutation" (mutmut run) first.')
    by_file = collections.defaultdict(collections.Counter)
    for name, outcome in found.items():
        by_file[module_of(name)][outcome] += 1
    kinds = sorted({outcome for counts in by_file.values() for outcome in counts})
    survivors = sorted(name for name, outcome in found.items() if outcome not in ("killed", "timeout"))
    equivalent = [name for name in survivors if WHY.get(name, "").startswith("equivalent")]
    killed = sum(outcome in ("killed", "timeout") for outcome in found.values())
    counted = len(found) - len(equivalent)
    print("| file | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for path, counts in sorted(by_file.items()):
        print(f"| `{path}` | " + " | ".join(str(counts[kind]) for kind in kinds) + " |")
    score = 100 * killed / counted
    print(f"\n{len(found)} mutants: {killed} killed, {len(survivors)} not, of which {len(equivalent)} equivalent. "
          f"Score: {killed} / {counted} = {score:.1f}% of the mutants that change behaviour.\n")  # fmt: skip
    for name in survivors:
        diff = mutmut("show", name)
        changed = [line for line in diff.splitlines() if re.match(r"^[-+](?![-+])", line)]
        print(f"- `{name}` ({found[name]}): {WHY.get(name, 'not yet read')}")
        print("  ```diff\n" + "\n".join(f"  {line}" for line in changed) + "\n  ```")


if __name__ == "__main__":
    main()
