"""`aiayn ablate`: rows of Table 3 trained on the bundled En-De verses, with a table, a JSON file and a plot."""

import json

import torch
import transformers
from transformers import AutoModelForSeq2SeqLM

from aiayn.ablation import MARIAN_POSITIONS, MODELS, marian_weights
from aiayn.cli import main
from aiayn.configuration_aiayn import preset_config


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


def test_marian_computes_what_aiayn_computes_from_the_same_weights():
    """`marian_weights` maps the paper's model onto `MarianMTModel`: same logits and the same beam search, so that
    `aiayn versus-marian` compares implementations of one architecture. Weights of std 0.2 and a larger token table
    give logits of order 10, where a wrong attention scale, position layout or norm placement would show."""
    config = preset_config("transformer-base", vocab_size=96, d_model=32, d_ff=64, num_heads=4, d_kv=8, num_layers=2,
                           num_decoder_layers=2, layer_norm_eps=1e-5, initializer_range=0.2, pad_token_id=0,
                           eos_token_id=2, decoder_start_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    aiayn = AutoModelForSeq2SeqLM.from_config(config).eval()
    with torch.no_grad():  # the tied table scales the logits: std d_model^-0.5 would give logits of order 1
        aiayn.get_input_embeddings().weight.mul_(4)
    marian = transformers.MarianMTModel(transformers.MarianConfig(
        vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function="relu",
        max_position_embeddings=MARIAN_POSITIONS, scale_embedding=True, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True, pad_token_id=0, eos_token_id=2, decoder_start_token_id=0, forced_eos_token_id=None,
    )).eval()  # fmt: skip
    missing, unexpected = marian.load_state_dict(marian_weights(aiayn), strict=False)
    assert unexpected == [] and sorted(missing) == sorted(
        [
            "final_logits_bias",
            "lm_head.weight",
            "model.encoder.embed_tokens.weight",
            "model.decoder.embed_tokens.weight",
        ]
    )  # the tied tables and a zero bias
    source = torch.randint(3, 96, (3, 9))
    mask = torch.ones_like(source)
    mask[1, 6:] = 0  # a padded row
    source[1, 6:] = 0
    target = torch.randint(3, 96, (3, 7))
    with torch.no_grad():
        ours = aiayn(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits
        theirs = marian(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits
    assert ours.std() > 3
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-5)  # 0.0 measured; a few ulps of logits near 16
    search = {"num_beams": 4, "length_penalty": 0.6, "max_new_tokens": 8, "min_new_tokens": 8}
    torch.testing.assert_close(
        aiayn.generate(source, attention_mask=mask, **search), marian.generate(source, attention_mask=mask, **search)
    )


def test_versus_marian_trains_aiayn_and_marian_from_shared_and_own_initial_weights(tmp_path):
    """A tiny `aiayn versus-marian`: two steps per run on 64 verses; the rows of the table and the runs' parameters."""
    main(["versus-marian", "--steps", "2", "--seeds", "1", "--eval-samples", "16", "--train-samples", "64",
          "--out", str(tmp_path)])  # fmt: skip
    with open(tmp_path / "versus_marian.json") as f:
        results = json.load(f)["results"]
    assert list(results) == list(MODELS)
    # Marian trains the same parameters, less its frozen sinusoid tables, less nothing else: one architecture.
    assert len({runs[0]["parameters"] for runs in results.values()}) == 1
    assert all(run["steps"] == 2 and run["loss"] > 0 for runs in results.values() for run in runs)
    table = (tmp_path / "versus_marian.md").read_text()
    assert all(f"| {name} |" in table for name in MODELS)
