"""`aiayn ablate`: rows of Table 3 trained on the bundled En-De verses, with a table, a JSON file and a plot."""

import json

from aiayn.cli import main


def test_ablate_runs_rows_and_writes_its_table_json_and_plot(tmp_path):
    """A tiny version of `aiayn ablate --rows A E --budget 60 --seeds 1`: two steps per run on 64 verses."""
    main(["ablate", "--rows", "E", "--budget", "2steps", "--seeds", "2", "--eval-samples", "24",
          "--train-samples", "64", "--out", str(tmp_path)])  # fmt: skip
    with open(tmp_path / "ablation.json") as f:
        results = json.load(f)["results"]
    assert [(r["row"], r["variant"]) for r in results] == [("base", "base"), ("E", "learned positions")]
    for result in results:
        assert len(result["runs"]) == 2 and all(run["steps"] == 2 for run in result["runs"])
        assert all(run["perplexity"] > 1 and 0 <= run["bleu"] <= 100 for run in result["runs"])
    # Learned positions add a trained table of max_position_embeddings x d_model to each stack.
    base, learned = (result["runs"][0]["parameters"] for result in results)
    assert learned - base == 2 * 512 * 128
    table = (tmp_path / "ablation.md").read_text()
    assert "| E | learned positions |" in table and " ± " in table and "| 25.7 |" in table
    assert (tmp_path / "ablation.png").stat().st_size > 0
