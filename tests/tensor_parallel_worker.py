"""Run by `torchrun --nproc_per_node 2` from test_scale_out.py: each family's language model loaded from FOLDER/FAMILY
with `tp_plan="auto"` and in one piece, the same batch through both, one SGD step on both. Writes, per rank, the
largest differences to OUT/rank<R>.json."""

import json
import os
import sys

import torch
import torch.distributed as dist
import transformers
from torch.distributed.tensor import DTensor
from transformers.distributed import DistributedConfig

import aiayn

folder, out = sys.argv[1], sys.argv[2]


def full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def compare(family: str) -> dict:
    auto_class = getattr(transformers, aiayn.FAMILIES[family].language_model_auto_class)
    path = os.path.join(folder, family)
    sharded = auto_class.from_pretrained(path, distributed_config=DistributedConfig(tp_plan="auto"))
    whole = auto_class.from_pretrained(path)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 90, (2, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    if family == "seq2seq":
        inputs["decoder_input_ids"] = torch.randint(3, 90, (2, 7), generator=generator)
        inputs["labels"] = inputs["decoder_input_ids"]
    result = {"sharded": sorted(name for name, p in sharded.named_parameters() if isinstance(p, DTensor))}
    with torch.no_grad():
        result["logits"] = (sharded(**inputs).logits - whole(**inputs).logits).abs().max().item()
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


results = {family: compare(family) for family in aiayn.FAMILIES}
with open(os.path.join(out, f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(results, f)
dist.destroy_process_group()
