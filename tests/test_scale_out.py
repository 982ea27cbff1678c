"""Scaling out: tensor parallelism over two CPU processes (torchrun, gloo) and PEFT's LoRA with its defaults."""

import json
import os
import subprocess
import sys

import peft
import pytest
import torch
from conftest import FAMILIES, LM_AUTO_CLASS, lm_model

HERE = os.path.dirname(os.path.abspath(__file__))
# Each family with what its plan shards besides the projections: gated feed-forward layers and relative position
# tables in the decoder, cross-attention and relative tables in the seq2seq model, the masked-LM head in the encoder.
TENSOR_PARALLEL_MODELS = {
    "encoder": {},
    "decoder": {"position_embedding_type": "relative", "hidden_act": "swiglu"},
    "seq2seq": {"position_embedding_type": "relative"},
}


def test_tensor_parallel_models_compute_and_train_as_one_process(tmp_path):
    """`from_pretrained(tp_plan="auto")` on 2 processes shards every family by `AiaynConfig.base_model_tp_plan`:
    logits, loss and the weights after an SGD step equal those of the model in one process, to float32 rounding of
    the summed partial products."""
    for family, overrides in TENSOR_PARALLEL_MODELS.items():
        lm_model(family, **overrides).save_pretrained(tmp_path / family)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               os.path.join(HERE, "tensor_parallel_worker.py"), str(tmp_path), str(tmp_path)]  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-8000:]
    for rank in (0, 1):
        with open(tmp_path / f"rank{rank}.json") as f:
            results = json.load(f)
        for family, measured in results.items():
            sharded = measured["sharded"]
            assert any("qkv_proj" in name for name in sharded) and any("ffn.down_proj" in name for name in sharded)
            if family == "seq2seq":
                assert any("cross_attn.kv_proj" in name for name in sharded)
            assert measured["logits"] <= 1e-5, (family, measured)
            assert measured["loss"] <= 1e-6 and measured["weights"] <= 1e-6, (family, measured)


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_defaults_adapt_every_family(family):
    """`LoraConfig()` without `target_modules`: importing aiayn told PEFT which projections to adapt. The adapted
    model starts where the model is (LoRA's B is zero), one step moves only the adapters, and merging them gives the
    adapted model's logits."""
    model = lm_model(family)
    ids = torch.randint(3, 90, (2, 7), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "labels": ids}
    with torch.no_grad():
        before = model(**inputs).logits
    adapted = peft.get_peft_model(model, peft.LoraConfig(init_lora_weights=True))
    expected = {"qkv_proj"} | ({"q_proj", "kv_proj"} if family == "seq2seq" else set())
    adapted_modules = {name.rsplit(".", 1)[-1] for name, m in adapted.named_modules() if hasattr(m, "lora_A")}
    assert adapted_modules == expected
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
        saved = auto_class.from_pretrained(tmp_path / family).state_dict()
        for name, tensor in model.state_dict().items():
            torch.testing.assert_close(saved[name], tensor, rtol=0, atol=1e-6, msg=name)
