"""Linformer (`linformer_k`) and BigBird's random blocks (`attention_random_blocks`): the seeds' last remedies for
attention's n x n cost, each a registered attention pattern, proven against references written from the papers."""

import math
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers
from helpers import hub_loading_environment, lm_model, one_layer, random_ids, tiny_config
from huggingface_hub.errors import StrictDataclassError

import aiayn
from aiayn.attention_aiayn import AiaynSelfAttention, AttentionPatternInputs, DotProductScore
from aiayn.attention_variants_aiayn import check_attention_backend
from aiayn.bigbird_aiayn import RandomBlocksAttention, block_key_positions, random_key_blocks
from aiayn.ctranslate2_export import unsupported_options
from aiayn.linformer_aiayn import LinformerAttention
from aiayn.local_attention_aiayn import BandedAttention, BandGeometry

WINDOW = 8  # blocks of 32 positions


def linformer(family="encoder", implementation="sdpa", **overrides):
    return lm_model(family, implementation, **{"linformer_k": 8, "max_position_embeddings": 64, **overrides})


def bigbird(family="encoder", implementation="sdpa", **overrides):
    fields = {"sliding_window": WINDOW, "attention_random_blocks": 2, "max_position_embeddings": 512}
    return lm_model(family, implementation, **{**fields, **overrides})


# -- configuration -----------------------------------------------------------------------------------------------


def test_the_fields_are_declared_saved_and_validated(tmp_path):
    config = tiny_config("encoder", sliding_window=8, attention_random_blocks=3, attention_random_seed=7)
    config.save_pretrained(tmp_path)
    loaded = transformers.AutoConfig.from_pretrained(tmp_path)
    assert (loaded.attention_random_blocks, loaded.attention_random_seed, loaded.linformer_k) == (3, 7, None)
    refusals = [
        ({"linformer_k": 0}, "linformer_k"),
        ({"attention_random_blocks": 2}, "set sliding_window too"),
        ({"linformer_k": 8, "sliding_window": 8}, "set one of them"),
        ({"linformer_k": 8, "position_embedding_type": "relative"}, "mixing their positions"),
    ]
    for fields, message in refusals:
        with pytest.raises(StrictDataclassError, match=message):
            tiny_config("encoder", **fields)
    with pytest.raises(StrictDataclassError, match="serves bidirectional stacks; AiaynDecoderConfig"):
        tiny_config("decoder", linformer_k=8)


def test_each_stack_takes_its_pattern():
    """A seq2seq model's encoder projects with Linformer, its causal decoder attends fully; random blocks replace the
    plain window they extend, in both stacks."""
    seq2seq = linformer("seq2seq")
    assert type(seq2seq.model.encoder.attention_pattern) is LinformerAttention
    assert type(seq2seq.model.decoder.attention_pattern).__name__ == "FullAttention"
    random_seq2seq = bigbird("seq2seq")
    assert {type(s.attention_pattern) for s in (random_seq2seq.model.encoder, random_seq2seq.model.decoder)} == {
        RandomBlocksAttention
    }
    assert [name for name, _ in linformer().named_parameters() if "pattern" in name] == [
        "model.encoder.attention_pattern.projections"
    ]


def test_the_ctranslate2_export_refuses_both_by_name():
    assert any("linformer_k=8" in reason for reason in unsupported_options(linformer().config))
    assert any("attention_random_blocks=2" in reason for reason in unsupported_options(bigbird().config))


# -- Linformer -----------------------------------------------------------------------------------------------------


def test_linformer_is_attention_over_the_projected_real_keys_and_values():
    """From the paper: `softmax(Q (E K)^T / sqrt(d_k)) (E V)` per head, with E the layer's (k, n) map cut to the
    input's length and the padded keys and values zero before it; a row of padding only gets zero output."""
    config = tiny_config("encoder", linformer_k=8, max_position_embeddings=64)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    pattern = LinformerAttention(config, False, 2)
    pattern.initialize_parameters()
    module = AiaynSelfAttention(config, 1, False, DotProductScore(config))
    query, key, value = torch.randn(3, 3, 4, 40, 8).unbind(0)
    mask = torch.ones(3, 40, dtype=torch.long)
    mask[1, 25:], mask[2] = 0, 0
    prepared = pattern.prepare(AttentionPatternInputs(torch.zeros(3, 40, 32), mask))
    with torch.no_grad():
        output, _ = prepared.attend(module, query, key, value, scaling=8**-0.5)
        expected = torch.zeros(3, 40, 4, 8)
        for row in range(2):
            real = int(mask[row].sum())
            projection = pattern.projections[1, :, :real]  # layer 1's map, its first `real` columns
            keys, values = projection @ key[row, :, :real], projection @ value[row, :, :real]
            weights = torch.softmax(query[row] @ keys.transpose(-1, -2) / math.sqrt(8), dim=-1)
            expected[row] = (weights @ values).transpose(0, 1)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-6)


def test_linformer_keeps_padding_out_and_reads_shorter_inputs_as_zero_padded_to_its_length():
    model = linformer()
    ids = random_ids(1, 40)
    padded = torch.cat((ids, random_ids(1, 24, seed=9)), dim=1)
    mask = torch.cat((torch.ones(1, 40), torch.zeros(1, 24)), dim=1).long()
    with torch.no_grad():
        short = model(ids).logits
        with_padding = model(padded, attention_mask=mask).logits[:, :40]
    torch.testing.assert_close(with_padding, short, rtol=0, atol=2e-6)


@pytest.mark.parametrize("family", ["encoder", "seq2seq", "vision"])
def test_linformer_runs_in_every_bidirectional_stack_with_eager_equal_to_sdpa_and_additive_scores(family):
    if family == "vision":
        config = aiayn.preset_config("tiny-vision", image_size=16, patch_size=4, linformer_k=4)
        models = [transformers.AutoModelForImageClassification.from_config(config, attn_implementation=i).eval()
                  for i in ("eager", "sdpa")]  # fmt: skip
        models[1].load_state_dict(models[0].state_dict())
        inputs = {"pixel_values": torch.randn(2, 3, 16, 16)}
    else:
        models = [linformer(family, implementation) for implementation in ("eager", "sdpa")]
        ids = random_ids(2, 30)
        inputs = {"input_ids": ids} | ({"decoder_input_ids": ids} if family == "seq2seq" else {})
    with torch.no_grad():
        eager, sdpa = (model(**inputs).logits for model in models)
    torch.testing.assert_close(sdpa, eager, rtol=0, atol=2e-6)
    if family == "encoder":
        with torch.no_grad():
            assert torch.isfinite(linformer(attention_score="additive")(**inputs).logits).all()


def test_linformer_refuses_inputs_longer_than_its_map_and_global_tokens():
    model = linformer(position_embedding_type="sinusoidal")  # learned positions would refuse the length first
    with pytest.raises(IndexError, match="projects keys and values along max_position_embeddings=64"):
        model(random_ids(1, 65))
    with pytest.raises(ValueError, match="takes no global_attention_mask"):
        model(random_ids(1, 8), global_attention_mask=torch.ones(1, 8, dtype=torch.long))


def test_a_token_8000_positions_away_changes_position_0_through_linformer():
    """The issue's setting: a 16384-token encoder of d_model 64, one layer, linformer_k 64."""
    config = aiayn.preset_config("tiny-encoder", vocab_size=97, d_model=64, num_heads=4, d_ff=128, num_layers=1,
                                 max_position_embeddings=16384, linformer_k=64, dropout=0.0)  # fmt: skip
    torch.manual_seed(0)
    model = aiayn.AiaynEncoderModel(config, add_pooling_layer=False).eval()
    ids = random_ids(1, 16384)
    changed = ids.clone()
    changed[0, 8000] = 3 + (ids[0, 8000] - 2) % 94
    with torch.no_grad():
        assert not torch.equal(model(ids).last_hidden_state[0, 0], model(changed).last_hidden_state[0, 0])


# -- BigBird's random blocks ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("is_causal", [False, True])
def test_random_key_blocks_lie_outside_the_band_and_causal_draws_ignore_the_length(is_causal):
    geometry = BandGeometry(WINDOW, is_causal)
    before, after = geometry.before // geometry.block, geometry.after // geometry.block
    table = random_key_blocks(3, 1, 20, 4, geometry, is_causal)
    for block, drawn in enumerate(table.tolist()):
        outside = [b for b in range(20) if b < block - before or (not is_causal and b > block + after)]
        chosen = [b for b in drawn if b >= 0]
        assert len(chosen) == min(4, len(outside)) and set(chosen) <= set(outside) and chosen == sorted(set(chosen))
    assert torch.equal(table, random_key_blocks(3, 1, 20, 4, geometry, is_causal))
    assert not torch.equal(table, random_key_blocks(3, 2, 20, 4, geometry, is_causal))  # another layer
    if is_causal:  # a block's draw depends on the blocks before it only
        assert torch.equal(random_key_blocks(3, 1, 30, 4, geometry, is_causal)[:20], table)


def dense_bigbird_attention(query, key, value, is_causal, padding, marks, table, block):
    """Attention through a mask written from the definitions: a key is allowed when it is real and within the window,
    or the query or the key is a global token, or the key's block is one `table` draws for the query's block; queries
    with no allowed key get zero output. Scale 1."""
    batch, _, length, _ = query.shape
    distance = torch.arange(length)[:, None] - torch.arange(length)[None, :]
    window = (distance >= 0) & (distance < WINDOW) if is_causal else distance.abs() <= WINDOW
    blocks = torch.arange(length) // block
    drawn = torch.zeros(table.shape[0], table.shape[0], dtype=torch.bool)
    for query_block, key_blocks in enumerate(table.tolist()):
        for key_block in key_blocks:
            if key_block >= 0:
                drawn[query_block, key_block] = True
    allowed = (window | drawn[blocks][:, blocks])[None].expand(batch, -1, -1)
    if marks is not None:
        allowed = allowed | marks.bool()[:, :, None] | marks.bool()[:, None, :]
    if padding is not None:
        allowed = allowed & padding.bool()[:, None, :]
    scores = (query @ key.transpose(-1, -2)).masked_fill(~allowed[:, None], float("-inf"))
    fully_masked = ~allowed.any(-1)[:, None, :, None]
    weights = torch.softmax(scores.masked_fill(fully_masked, 0.0), dim=-1)
    return (weights @ value).masked_fill(fully_masked, 0.0).transpose(1, 2)


@pytest.mark.parametrize(
    ("is_causal", "padding", "marks"), [(False, False, False), (False, True, True), (True, True, False)]
)
def test_random_blocks_in_bands_and_through_masks_are_attention_through_a_dense_mask(is_causal, padding, marks):
    torch.manual_seed(0)
    length = 230
    config = tiny_config("encoder", sliding_window=WINDOW, attention_random_blocks=2)
    config._attn_implementation = "sdpa"
    query, key, value = torch.randn(3, 2, 4, length, 8).unbind(0)
    mask = torch.ones(2, length, dtype=torch.long)
    if padding:
        mask[1, 180:] = 0
    global_marks = None
    if marks:
        global_marks = torch.zeros(2, length, dtype=torch.long)
        global_marks[0, 0], global_marks[1, [0, 50, 120]] = 1, 1
    pattern = RandomBlocksAttention(config, is_causal, 2)
    tables = pattern.key_blocks(length, "cpu")
    block = BandGeometry(WINDOW, is_causal).block
    banded = BandedAttention(WINDOW, is_causal, 2, length, mask if padding else None, None, torch.float32, "cpu",
                             global_tokens=global_marks.bool() if marks else None,
                             layer_keys=block_key_positions(tables, block, length))  # fmt: skip
    eager_config = tiny_config("encoder", sliding_window=WINDOW, attention_random_blocks=2)
    eager_config._attn_implementation = "eager"
    through_masks = RandomBlocksAttention(eager_config, is_causal, 2).prepare(
        AttentionPatternInputs(
            torch.zeros(2, length, 32), mask, None, torch.arange(length)[None], global_attention_mask=global_marks
        )
    )
    for layer in (0, 1):
        module = AiaynSelfAttention(config, layer, is_causal, DotProductScore(config))
        eager_module = AiaynSelfAttention(eager_config, layer, is_causal, DotProductScore(eager_config))
        with torch.no_grad():
            expected = dense_bigbird_attention(query, key, value, is_causal, mask, global_marks, tables[layer], block)
            torch.testing.assert_close(banded.attend(module, query, key, value, scaling=1.0)[0], expected, rtol=0,
                                       atol=2e-6)  # fmt: skip
            torch.testing.assert_close(through_masks.attend(eager_module, query, key, value, scaling=1.0)[0],
                                       expected, rtol=0, atol=2e-6)  # fmt: skip
    assert not torch.equal(tables[0], tables[1])  # each layer its own blocks


@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_tokens_beyond_the_window_change_some_outputs_only_with_random_blocks(family):
    """No global token: with a window of 8 alone, position 200's output ignores every token before 180; with two
    random blocks per block of queries, some position changes when such a token does."""
    ids = random_ids(1, 230)
    changed = ids.clone()
    changed[0, 40] = 3 + (ids[0, 40] - 2) % 94
    differences = {}
    for random_blocks in (None, 2):
        model = bigbird(family, attention_random_blocks=random_blocks)
        with torch.no_grad():
            before, after = model(ids).logits[0, 150:], model(changed).logits[0, 150:]
        differences[random_blocks] = (before != after).any(-1).sum().item()
    assert differences[None] == 0 and differences[2] > 0


@pytest.mark.parametrize("family", ["encoder", "decoder", "seq2seq"])
def test_banded_random_blocks_give_the_masked_models_outputs_and_gradients(family):
    ids = random_ids(2, 230)
    mask = torch.ones_like(ids)
    mask[1, 200:] = 0 if family != "decoder" else 1
    inputs = {"input_ids": ids, "attention_mask": mask} | (
        {"decoder_input_ids": ids, "decoder_attention_mask": mask} if family == "seq2seq" else {}
    )
    results = []
    for implementation in ("eager", "sdpa"):
        model = bigbird(family, implementation).train()
        loss = model(**inputs, labels=ids).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=0, atol=1e-6)
    for name, grad in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], grad, rtol=0, atol=1e-6, msg=name)


def test_a_decoder_with_random_blocks_decodes_uncached_and_refuses_a_cache_by_name():
    model = bigbird("decoder")
    ids = random_ids(1, 100)
    tokens = model.generate(ids, max_new_tokens=5, do_sample=False, use_cache=False)
    with torch.no_grad():
        assert tokens[0, 100] == model(ids).logits[0, -1].argmax()
    with pytest.raises(ValueError, match="use_cache=False"):
        model.generate(ids, max_new_tokens=5, do_sample=False)


# -- every way a model runs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["linformer", "random_blocks"])
def test_compile_export_onnx_and_int8_run_both_patterns(pattern):
    import onnxruntime

    model = linformer(**one_layer("encoder")) if pattern == "linformer" else bigbird(**one_layer("encoder"))
    ids = random_ids(2, 60 if pattern == "linformer" else 230)
    inputs = {"input_ids": ids}
    with torch.no_grad():
        expected = model(**inputs).logits
        compiled = torch.compile(model)(**inputs).logits
        exported = torch.export.export(model, (), kwargs=inputs).module()(**inputs).logits
        quantised = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)(
            **inputs
        ).logits
    torch.testing.assert_close(compiled, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(exported, expected, rtol=0, atol=1e-6)
    assert torch.isfinite(quantised).all() and (quantised - expected).abs().max() < 0.1 * expected.abs().max()
    program = torch.onnx.export(model, (), kwargs=inputs, dynamo=True, verbose=False)
    session = onnxruntime.InferenceSession(program.model_proto.SerializeToString())
    logits = session.run(None, {"input_ids": ids.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(logits), expected, rtol=0, atol=1e-5)


LOADER = textwrap.dedent(
    """
    import sys
    sys.modules["aiayn"] = None  # only the folders' own code can build the models
    import torch, transformers

    for folder in sys.argv[1:]:
        expected = torch.load(folder + "/expected.pt")
        model = transformers.AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        with torch.no_grad():
            assert torch.equal(model(expected["ids"]).logits, expected["logits"]), folder
    print("same logits")
    """
)


def test_saved_folders_give_the_same_logits_in_a_process_without_aiayn_and_random_blocks_in_two_processes(tmp_path):
    """A Linformer folder and a random-blocks folder load where aiayn cannot be imported, with the logits of this
    process: the random blocks are drawn from the saved seed, the same in every process."""
    folders = []
    for name, model, length in (("linformer", linformer(), 60), ("random_blocks", bigbird(), 230)):
        folder = tmp_path / name
        model.save_pretrained(folder)
        ids = random_ids(1, length)
        with torch.no_grad():
            torch.save({"ids": ids, "logits": model(ids).logits}, folder / "expected.pt")
        folders.append(str(folder))
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    for _ in range(2):  # two fresh processes
        result = subprocess.run(
            [sys.executable, "-c", LOADER, *folders],
            cwd=workdir,
            env=hub_loading_environment(tmp_path),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0 and "same logits" in result.stdout, result.stderr[-3000:]


def test_variants_refuse_the_backends_they_do_not_serve_by_name():
    """Flash attention takes a window but no mask: the random blocks, built from mask functions, would be lost, so
    every flash kernel is refused by the field that chose them; the window alone reaches flash as its window."""
    config = tiny_config("encoder", sliding_window=4, attention_random_blocks=1)
    message = r"attention_random_blocks=1 \(RandomBlocksAttention\) runs under attn_implementation 'eager', 'sdpa', "
    flash = ("flash_attention_2", "flash_attention_3", "kernels-community/flash-attn2", "paged|flash_attention_2")
    for implementation in flash:
        with pytest.raises(ValueError, match=message + "'flex_attention'; " + re.escape(repr(implementation))):
            check_attention_backend(config, implementation)
    for implementation in ("eager", "sdpa", "flex_attention"):
        check_attention_backend(config, implementation)
    check_attention_backend(tiny_config("encoder", sliding_window=4), "flash_attention_2")


def test_two_seeds_draw_different_blocks_and_each_folder_reloads_its_own(tmp_path):
    """`attention_random_seed` decides the draw: two seeds give different blocks and logits from the same weights, and
    a saved folder reloads with its own seed's logits."""
    ids = random_ids(1, 230)
    logits = {}
    for seed in (0, 1):
        model = bigbird(attention_random_seed=seed)
        with torch.no_grad():
            logits[seed] = model(ids).logits
        model.save_pretrained(tmp_path / str(seed))
    tables = [RandomBlocksAttention(tiny_config("encoder", sliding_window=WINDOW, attention_random_blocks=2,
                                                attention_random_seed=seed), False, 2).key_blocks(230, "cpu")
              for seed in (0, 1)]  # fmt: skip
    assert not torch.equal(tables[0], tables[1])
    assert (logits[0] - logits[1]).abs().max() > 1e-3
    for seed in (0, 1):
        reloaded = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / str(seed)).eval()
        assert reloaded.config.attention_random_seed == seed
        with torch.no_grad():
            torch.testing.assert_close(reloaded(ids).logits, logits[seed], rtol=0, atol=0)


# -- a new variant ------------------------------------------------------------------------------------------------

DILATED_WINDOW_MODULE = '''
"""A dilated window: a query sees the keys at distances 0, d, 2d, ... up to `dilated_window` on either side."""

from dataclasses import dataclass

from transformers.masking_utils import create_bidirectional_mask

from .attention_aiayn import FullAttention
from .field_validators_aiayn import positive


@dataclass(kw_only=True, repr=False, eq=False)
class DilatedWindowFields:
    """Attributes:
        dilated_window: The farthest key a query sees; None: none.
        dilation: The distance between the keys it sees.
    """

    dilated_window: int | None = positive(default=None)
    dilation: int = positive(default=2)

    def validate_dilation(self):
        if self.dilated_window is not None and self.dilated_window % self.dilation:
            raise ValueError(f"dilated_window ({self.dilated_window}) is not a multiple of dilation ({self.dilation})")


class DilatedWindowAttention(FullAttention):
    config_fields = DilatedWindowFields
    config_field = "dilated_window"
    stacks = ("bidirectional",)
    backends = ("eager", "sdpa", "flex_attention")
    inputs = ()

    def mask(self, inputs, overlay=None):
        window, dilation = self.config.dilated_window, self.config.dilation

        def dilated(batch_idx, head_idx, q_idx, kv_idx):
            distance = (q_idx - kv_idx).abs()
            return (distance <= window) & (distance % dilation == 0)

        return create_bidirectional_mask(config=self.config, inputs_embeds=inputs.hidden_states,
                                         attention_mask=inputs.attention_mask, and_mask_function=dilated)
'''

NEW_VARIANT_RUN = textwrap.dedent(
    """
    import sys
    import pytest, torch, transformers
    from huggingface_hub.errors import StrictDataclassError
    import aiayn
    from aiayn.attention_variants_aiayn import check_attention_backend

    assert aiayn.__file__.startswith(sys.argv[1]), aiayn.__file__
    fields = dict(vocab_size=97, d_model=32, num_heads=4, d_ff=48, num_layers=2, dropout=0.0, attention_dropout=0.0,
                  max_position_embeddings=64)
    with pytest.raises(StrictDataclassError, match=r"dilated_window \\(6\\) is not a multiple of dilation"):
        aiayn.preset_config("tiny-encoder", dilated_window=6, dilation=4)
    with pytest.raises(StrictDataclassError, match="dilated_window selects DilatedWindowAttention, which serves"):
        aiayn.preset_config("tiny-decoder", dilated_window=4)
    with pytest.raises(ValueError, match="dilated_window=4 .DilatedWindowAttention. runs under"):
        check_attention_backend(aiayn.preset_config("tiny-encoder", dilated_window=4), "flash_attention_2")
    config = aiayn.preset_config("tiny-encoder", dilated_window=4, attn_implementation="eager", **fields)
    torch.manual_seed(0)
    model = transformers.AutoModelForMaskedLM.from_config(config).eval()
    ids = torch.randint(3, 97, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        output = model(ids, output_attentions=True)
    distance = (torch.arange(11)[:, None] - torch.arange(11)[None, :]).abs()
    seen = (distance <= 4) & (distance % 2 == 0)
    for weights in output.attentions:
        assert bool((weights[..., ~seen] == 0).all()) and bool((weights[..., seen] > 0).all())
    model.set_attn_implementation("sdpa")
    with torch.no_grad():  # measured 4.5e-8 apart (float32 sums in another order)
        torch.testing.assert_close(model(ids).logits, output.logits, rtol=0, atol=1e-6)
        expected = model(ids).logits
    model.save_pretrained(sys.argv[2])
    torch.save({"ids": ids, "logits": expected}, sys.argv[2] + "/expected.pt")
    print("dilated window saved")
    """
)


def test_a_new_pattern_is_one_module_and_one_registry_line(tmp_path):
    """The walkthrough's steps on a copy of the package: a dilated window in a module of its own, declaring its config
    fields, check, stacks and backends, and one entry in the registry (with its import). The config takes and checks
    its fields, refuses it where it cannot apply, the model attends as it says, and a saved folder carries the new
    file to a process without aiayn, with the same logits."""
    import shutil

    package = tmp_path / "package" / "aiayn"
    shutil.copytree(os.path.dirname(aiayn.__file__), package, ignore=shutil.ignore_patterns("__pycache__", "hub_card"))
    (package / "dilated_window_aiayn.py").write_text(DILATED_WINDOW_MODULE)
    registry = (package / "attention_variants_aiayn.py").read_text()
    registry = registry.replace(
        "from .bigbird_aiayn import",
        "from .dilated_window_aiayn import DilatedWindowAttention\nfrom .bigbird_aiayn import",
    ).replace(
        '    "full": FullAttention,\n', '    "full": FullAttention,\n    "dilated_window": DilatedWindowAttention,\n'
    )
    (package / "attention_variants_aiayn.py").write_text(registry)
    folder = tmp_path / "dilated"
    environment = {**hub_loading_environment(tmp_path), "PYTHONPATH": str(package.parent)}
    result = subprocess.run(
        [sys.executable, "-c", NEW_VARIANT_RUN, str(package), str(folder)],
        cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0 and "dilated window saved" in result.stdout, result.stderr[-3000:]
    assert (folder / "dilated_window_aiayn.py").exists()
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", LOADER, str(folder)],
        cwd=workdir, env=hub_loading_environment(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0 and "same logits" in result.stdout, result.stderr[-3000:]
