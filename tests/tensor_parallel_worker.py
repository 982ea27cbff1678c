"""Run by `torchrun --nproc_per_node 2` from test_scale_out.py. Each case is a language model saved in FOLDER/CASE,
loaded with `tp_plan="auto"` and in one piece: the same padded batch through both, one SGD step on both (for the
cases that train). Writes, per rank, the largest differences, the local shape of every sharded parameter, or the
error the sharded model raised, to OUT/rank<R>.json."""

import json
import os
import sys

import torch
import torch.distributed as dist
import transformers
from torch.distributed.tensor import DTensor
from transformers.distributed import DistributedConfig

import aiayn  # noqa: F401  (registers the Auto classes)

folder, out = sys.argv[1], sys.argv[2]
AUTO_CLASSES = {
    "encoder": transformers.AutoModelForMaskedLM,
    "decoder": transformers.AutoModelForCausalLM,
    "seq2seq": transformers.AutoModelForSeq2SeqLM,
}
# case -> (the folder, the sharded model's attention backend, whether it trains); the model in one piece runs sdpa.
CASES = {
    "encoder": ("encoder", "sdpa", True),
    "decoder": ("decoder", "sdpa", True),
    "seq2seq": ("seq2seq", "sdpa", True),
    # Flex attention reads the relative bias by head index (`position_bias[b, h, q, k]`): a bias not cut to this
    # rank's heads is read without an error, and gives rank 1 the biases of rank 0's heads. (Its reference runs sdpa:
    # a second flex kernel of other sizes in the same process fails to compile in torch's CPU template.)
    "decoder-flex": ("decoder", "flex_attention", False),
    "decoder-3-heads": ("decoder-3-heads", "sdpa", False),
}


def full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def batch(family: str) -> dict:
    """Three rows: whole, right-padded and left-padded."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 90, (3, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 6:], mask[2, :2] = 0, 0
    inputs = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    if family == "seq2seq":
        inputs["decoder_input_ids"] = torch.randint(3, 90, (3, 7), generator=generator)
        inputs["labels"] = inputs["decoder_input_ids"]
    return inputs


def compare(case: str) -> dict:
    name, attn_implementation, trains = CASES[case]
    family = name.split("-")[0]
    auto_class, path = AUTO_CLASSES[family], os.path.join(folder, name)
    tp_plan = DistributedConfig(tp_plan="auto")
    whole = auto_class.from_pretrained(path, attn_implementation="sdpa")
    inputs = batch(family)
    try:
        sharded = auto_class.from_pretrained(path, distributed_config=tp_plan, attn_implementation=attn_implementation)
        with torch.no_grad():
            logits = (sharded(**inputs).logits - whole(**inputs).logits).abs().max().item()
    except Exception as error:  # reported to the test, which asserts its type and message
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0]}"}
    result = {
        "local_shapes": {
            name: list(p.to_local().shape) for name, p in sharded.named_parameters() if isinstance(p, DTensor)
        },
        "logits": logits,
    }
    if not trains:
        return result
    losses = []
    for model in (sharded, whole):
        model.train()
        loss = model(**inputs).loss
        loss.backward()
        torch.optim.SGD(model.parameters(), lr=0.5).step()
        losses.append(loss.item())
    result["loss"] = abs(losses[0] - losses[1])
    reference = dict(whole.named_parameters())
    result["weights"] = max(
        (full(p.detach()) - reference[name].detach()).abs().max().item() for name, p in sharded.named_parameters()
    )
    return result


results = {case: compare(case) for case in CASES if os.path.isdir(os.path.join(folder, CASES[case][0]))}
with open(os.path.join(out, f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(results, f)
dist.destroy_process_group()
