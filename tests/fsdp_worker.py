"""Run by `torchrun --nproc_per_node 2` from test_scale_out.py: each family's language model from FOLDER/FAMILY,
sharded with FSDP2 (`fully_shard` on every module `_no_split_modules` names, then on the model), takes 3 SGD steps
on its half of a batch of 4. Rank 0 writes the losses to OUT/losses.json and the trained model, gathered, to
OUT/FAMILY with `save_pretrained`."""

import json
import os
import sys

import torch
import torch.distributed as dist
import transformers
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

import aiayn  # noqa: F401  (registers the Auto classes)

folder, out = sys.argv[1], sys.argv[2]
AUTO_CLASSES = {
    "encoder": transformers.AutoModelForMaskedLM,
    "decoder": transformers.AutoModelForCausalLM,
    "seq2seq": transformers.AutoModelForSeq2SeqLM,
}
dist.init_process_group("gloo")
rank = dist.get_rank()
losses = {}
for family, auto_class in AUTO_CLASSES.items():
    model = auto_class.from_pretrained(os.path.join(folder, family))
    for module in model.modules():
        if type(module).__name__ in model._no_split_modules:
            fully_shard(module)
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = torch.randint(3, 90, (4, 8), generator=torch.Generator().manual_seed(0))[2 * rank : 2 * rank + 2]
    inputs = {"input_ids": ids, "labels": ids} | ({"decoder_input_ids": ids} if family == "seq2seq" else {})
    model.train()
    losses[family] = []
    for _ in range(3):
        loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses[family].append(mean.item() / 2)
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        model.save_pretrained(os.path.join(out, family), state_dict=state)
    dist.barrier()
if rank == 0:
    with open(os.path.join(out, "losses.json"), "w") as f:
        json.dump(losses, f)
dist.destroy_process_group()
