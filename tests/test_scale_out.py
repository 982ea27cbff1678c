"""Scaling out: tensor parallelism over two CPU processes (torchrun, gloo) and PEFT's LoRA with its defaults."""

import copy
import json
import os
import subprocess
import sys

import peft
import pytest
import torch
import transformers
from helpers import FAMILIES, LM_AUTO_CLASS, lm_model, tiny_config
from transformers.distributed.parallel_utils import _get_parameter_plan

import aiayn
from aiayn.families import FAMILIES as FAMILIES_TABLE

HERE = os.path.dirname(os.path.abspath(__file__))
# Each family with what its plan shards besides the projections: gated feed-forward layers and relative position
# tables in the decoder, cross-attention and relative tables in the seq2seq model, the masked-LM head in the encoder.
TENSOR_PARALLEL_MODELS = {
    "encoder": {},
    "decoder": {"position_embedding_type": "relative", "hidden_act": "swiglu"},
    "seq2seq": {"position_embedding_type": "relative"},
}
# The largest differences from the model in one process allowed on 2 ranks (logits, loss, weights after an SGD step),
# 2.5 to 3 times those measured (float32 rounding of the summed partial products):
TENSOR_PARALLEL_TOLERANCES = {
    "encoder": (2e-7, 5e-7, 3e-7),  # measured 7.5e-8, 0.0, 1.2e-7
    "decoder": (3e-7, 5e-7, 2e-7),  # measured 1.2e-7, 0.0, 7.5e-8
    "seq2seq": (2.5e-6, 5e-7, 1.5e-7),  # measured 9.5e-7, 0.0, 6.0e-8
}  # a loss measured equal is allowed one rounding step: 4.8e-7 is the float32 spacing of a loss of about 4.6
# The local shape of each sharded parameter on rank 0 and on rank 1 (d_model 32, 4 heads of 8, d_ff 64, 97 tokens):
# the token table (and the masked-LM head's bias) by vocabulary rows, 49 then 48; whole heads of the attention
# projections into heads; half of d_ff in `up_proj` and `gate_proj`; the projections out of heads and of the
# feed-forward width by input columns, their bias replicated.
TABLE_SHAPES = {"weight": ([49, 32], [48, 32]), "bias": ([49], [48])}
LAYER_SHAPES = {
    "self_attn.qkv_proj.weight": [48, 32],
    "self_attn.qkv_proj.bias": [48],
    "self_attn.o_proj.weight": [32, 16],
    "self_attn.o_proj.bias": [32],
    "cross_attn.q_proj.weight": [16, 32],
    "cross_attn.q_proj.bias": [16],
    "cross_attn.kv_proj.weight": [32, 32],
    "cross_attn.kv_proj.bias": [32],
    "cross_attn.o_proj.weight": [32, 16],
    "cross_attn.o_proj.bias": [32],
    "ffn.up_proj.weight": [32, 32],
    "ffn.up_proj.bias": [32],
    "ffn.gate_proj.weight": [32, 32],
    "ffn.gate_proj.bias": [32],
    "ffn.down_proj.weight": [32, 32],
    "ffn.down_proj.bias": [32],
}
# family -> its sharded tables and its stacks (prefix, layers, with cross-attention, with a gated feed-forward).
SHARDED_PARTS = {
    "encoder": (
        {"model.encoder.embeddings.embed_tokens.weight": "weight", "lm_head.decoder.bias": "bias"},
        [("model.encoder", 2, False, False)],
    ),
    "decoder": ({"model.decoder.embeddings.embed_tokens.weight": "weight"}, [("model.decoder", 2, False, True)]),
    "seq2seq": (
        {"model.shared.weight": "weight"},
        [("model.encoder", 2, False, False), ("model.decoder", 3, True, False)],
    ),
}


def expected_local_shapes(family: str, rank: int) -> dict[str, list[int]]:
    tables, stacks = SHARDED_PARTS[family]
    shapes = {name: TABLE_SHAPES[kind][rank] for name, kind in tables.items()}
    for prefix, layers, cross_attention, gated in stacks:
        for name, shape in LAYER_SHAPES.items():
            if (cross_attention or "cross_attn" not in name) and (gated or "gate_proj" not in name):
                shapes.update({f"{prefix}.layers.{i}.{name}": shape for i in range(layers)})
    return shapes


@pytest.fixture(scope="module")
def tensor_parallel_results(tmp_path_factory) -> list[dict]:
    """Each rank's report from `tensor_parallel_worker.py` under `torchrun --nproc_per_node 2` (gloo): every family,
    the relative decoder under flex attention, and a decoder of 3 heads."""
    root = tmp_path_factory.mktemp("tensor_parallel")
    for family, overrides in TENSOR_PARALLEL_MODELS.items():
        lm_model(family, **overrides).save_pretrained(root / family)
    lm_model("decoder", position_embedding_type="relative", num_heads=3, d_kv=8).save_pretrained(
        root / "decoder-3-heads"
    )
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               os.path.join(HERE, "tensor_parallel_worker.py"), str(root), str(root)]  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-8000:]
    results = []
    for rank in (0, 1):
        with open(root / f"rank{rank}.json") as f:
            results.append(json.load(f))
    return results


@pytest.mark.parametrize("family", FAMILIES)
def test_tensor_parallel_models_compute_and_train_as_one_process(family, tensor_parallel_results):
    """`from_pretrained(tp_plan="auto")` on 2 processes shards every family by its plan: logits, loss and the weights
    after an SGD step equal those of the model in one process, to float32 rounding of the summed partial products."""
    logits, loss, weights = TENSOR_PARALLEL_TOLERANCES[family]
    for rank, results in enumerate(tensor_parallel_results):
        measured = results[family]
        assert "error" not in measured, (rank, measured.get("error"))
        assert measured["logits"] <= logits, (rank, measured)
        assert measured["loss"] <= loss and measured["weights"] <= weights, (rank, measured)


@pytest.mark.parametrize("family", FAMILIES)
def test_tensor_parallel_shards_the_token_table_the_feed_forward_and_the_cross_attention_queries(
    family, tensor_parallel_results
):
    """Every sharded parameter of each rank, with its local shape: the token table by vocabulary rows, `up_proj` and
    `gate_proj` by columns, `qkv_proj`, `cross_attn.q_proj` and `kv_proj` by whole heads, `o_proj` and `down_proj`
    by input columns."""
    for rank, results in enumerate(tensor_parallel_results):
        assert results[family]["local_shapes"] == expected_local_shapes(family, rank), rank


def test_tensor_parallel_relative_bias_under_flex_attention_gives_each_rank_its_heads(tensor_parallel_results):
    """Flex attention takes the relative bias apart from the mask and indexes it by head: each rank must read its own
    heads' columns (rank 1 the bias of heads 2 and 3). The logits equal those of the model in one process (sdpa)."""
    for rank, results in enumerate(tensor_parallel_results):
        measured = results["decoder-flex"]
        assert "error" not in measured, (rank, measured.get("error"))
        assert measured["logits"] <= 2.5e-7, (rank, measured)  # measured 8.9e-8


def test_tensor_parallel_refuses_a_head_count_the_ranks_do_not_divide(tensor_parallel_results):
    """3 heads on 2 ranks: loading refuses it with a `ValueError` naming the head count and the number of ranks."""
    for rank, results in enumerate(tensor_parallel_results):
        error = results["decoder-3-heads"].get("error", "")
        assert error == (
            "ValueError: Tensor parallelism over 2 ranks needs num_heads divisible by 2; the model has num_heads=3."
        ), (rank, error)


def adapt_and_train(model, lora_config: "peft.LoraConfig") -> set[str]:
    """Adapts `model` by `lora_config` and checks that the adapted model starts where the model is (LoRA's B is
    zero), that one step moves only the adapters, and that merging them gives the adapted model's logits. Returns the
    names of the adapted modules."""
    ids = torch.randint(3, 90, (2, 7), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "labels": ids}
    with torch.no_grad():
        before = model(**inputs).logits
    adapted = peft.get_peft_model(model, lora_config)
    names = {name.removeprefix("base_model.model.") for name, m in adapted.named_modules() if hasattr(m, "lora_A")}
    with torch.no_grad():
        torch.testing.assert_close(adapted(**inputs).logits, before, rtol=0, atol=0)
    frozen = {name: p.detach().clone() for name, p in adapted.named_parameters() if not p.requires_grad}
    adapted.train()
    adapted(**inputs).loss.backward()
    torch.optim.SGD([p for p in adapted.parameters() if p.requires_grad], lr=1.0).step()
    adapted.eval()
    assert all(torch.equal(p, frozen[name]) for name, p in adapted.named_parameters() if not p.requires_grad)
    with torch.no_grad():
        tuned = adapted(**inputs).logits
        merged = adapted.merge_and_unload()(**inputs).logits
    assert not torch.equal(tuned, before)
    torch.testing.assert_close(merged, tuned, rtol=1e-5, atol=1e-5)
    return names


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_defaults_adapt_every_family(family):
    """`LoraConfig()` without `target_modules`: importing aiayn told PEFT which projections to adapt."""
    adapted = adapt_and_train(lm_model(family), peft.LoraConfig(init_lora_weights=True))
    expected = {"qkv_proj"} | ({"q_proj", "kv_proj"} if family == "seq2seq" else set())
    assert {name.rsplit(".", 1)[-1] for name in adapted} == expected


def layer_modules(stack: str, layers: int, names: list[str]) -> set[str]:
    return {f"{stack}.layers.{i}.{name}" for i in range(layers) for name in names}


SELF_ATTENTION_AND_FEED_FORWARD = ["self_attn.qkv_proj", "self_attn.o_proj", "ffn.up_proj", "ffn.down_proj"]
CROSS_ATTENTION = ["cross_attn.q_proj", "cross_attn.kv_proj", "cross_attn.o_proj"]
# Every projection of every layer, and the masked-LM head's transform; not the output projection to the vocabulary.
ALL_LINEAR_TARGETS = {
    "encoder": layer_modules("model.encoder", 2, SELF_ATTENTION_AND_FEED_FORWARD) | {"lm_head.dense"},
    "decoder": layer_modules("model.decoder", 2, [*SELF_ATTENTION_AND_FEED_FORWARD, "ffn.gate_proj"]),
    "seq2seq": layer_modules("model.encoder", 2, SELF_ATTENTION_AND_FEED_FORWARD)
    | layer_modules("model.decoder", 3, SELF_ATTENTION_AND_FEED_FORWARD + CROSS_ATTENTION),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_all_linear_adapts_every_projection(family):
    """`LoraConfig(target_modules="all-linear")` adapts `qkv_proj` and `o_proj`, the encoder-decoder attention's
    `q_proj`, `kv_proj` and `o_proj`, `up_proj`, `gate_proj` (a gated decoder here) and `down_proj` of every layer,
    and the adapted model trains."""
    model = lm_model(family, hidden_act="swiglu") if family == "decoder" else lm_model(family)
    adapted = adapt_and_train(model, peft.LoraConfig(target_modules="all-linear"))
    assert adapted == ALL_LINEAR_TARGETS[family]


def test_fsdp2_shards_train_and_save_as_one_process(tmp_path):
    """FSDP2 (torch's `fully_shard`, on the modules `_no_split_modules` names) over 2 processes, each on half of a
    batch of 4: 3 SGD steps give the losses and weights of one process on the whole batch, and the gathered model
    saves a folder whose code and `auto_map` are aiayn's (not the class FSDP2 makes on the fly). Through accelerate
    or the Trainer's `fsdp` option this cannot run on CPUs: accelerate turns FSDP on only for accelerators (a CPU
    run silently becomes DDP), so on CPUs FSDP2 is driven as torch's users drive it."""
    for family in FAMILIES:
        lm_model(family).save_pretrained(tmp_path / "start" / family)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               os.path.join(HERE, "fsdp_worker.py"), str(tmp_path / "start"), str(tmp_path)]  # fmt: skip
    result = subprocess.run(
        command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-8000:]
    with open(tmp_path / "losses.json") as f:
        sharded_losses = json.load(f)
    ids = torch.randint(3, 90, (4, 8), generator=torch.Generator().manual_seed(0))
    for family in FAMILIES:
        auto_class = LM_AUTO_CLASS[family]
        model = auto_class.from_pretrained(tmp_path / "start" / family)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        inputs = {"input_ids": ids, "labels": ids} | ({"decoder_input_ids": ids} if family == "seq2seq" else {})
        model.train()
        losses = []
        for _ in range(3):
            loss = model(**inputs).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        torch.testing.assert_close(sharded_losses[family], losses, rtol=1e-6, atol=1e-6)
        with open(tmp_path / family / "config.json") as f:
            auto_map = json.load(f)["auto_map"]
        assert auto_map[auto_class.__name__] == f"modeling_aiayn_{family}.{type(model).__name__}"
        assert not [name for name in os.listdir(tmp_path / family) if name.startswith("_fsdp")]
        assert {f"modeling_aiayn_{family}.py", "modeling_aiayn.py", "attention_aiayn.py"} <= set(
            os.listdir(tmp_path / family)
        )
        saved = auto_class.from_pretrained(tmp_path / family).state_dict()
        for name, tensor in model.state_dict().items():
            torch.testing.assert_close(saved[name], tensor, rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize("family", ["encoder", "decoder", "seq2seq", "vision"])
@pytest.mark.parametrize("positions", ["relative", "sinusoidal"])
def test_tp_plan_matches_params(family, positions):
    """transformers' `test_tp_plan_matches_params` (tests/test_modeling_common.py), for every head of each family: the
    config holds the plan (`base_model_tp_plan`), and each entry of every model's plan matches a parameter or a
    module of that model (transformers' own matching, `_get_parameter_plan`)."""
    if family == "vision":
        config = aiayn.preset_config("tiny-vision", image_size=16, patch_size=4, d_model=32, num_labels=3)
    else:
        config = tiny_config(family, position_embedding_type=positions, num_labels=3)
    assert config.base_model_tp_plan
    for auto_class in FAMILIES_TABLE[family].auto_classes:
        model = getattr(transformers, auto_class).from_config(copy.deepcopy(config))
        model_class = type(model)
        param_names = {name for name, _ in model.named_parameters()} | {name for name, _ in model.named_buffers()}
        module_names = {name for name, _ in model.named_modules()}
        assert model.tp_plan, model_class.__name__
        unused = {
            pattern
            for pattern in model.tp_plan
            if not any(_get_parameter_plan(name, {pattern: ""}, is_weight=True) is not None for name in param_names)
            and not any(_get_parameter_plan(name, {pattern: ""}, is_weight=False) is not None for name in module_names)
        }
        assert not unused, f"{model_class.__name__}: entries of the TP plan that match nothing: {unused}"
