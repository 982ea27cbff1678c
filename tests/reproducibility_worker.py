"""Run by test_reproducibility.py in a fresh process: for each family at d_model 512, from seed 0, the digests of the
forward logits, a training step's loss and gradient norms (dropout on) and the greedy scores of one sequence and of a
batch. Prints "ready" once imported, measures when a line comes on stdin (so that the test decides what runs beside
the measurements), and prints the digests as one JSON object."""

import hashlib
import json
import sys

import torch
import transformers

import aiayn

MODELS = {
    "encoder": ("tiny-encoder", transformers.AutoModelForMaskedLM),
    "decoder": ("tiny-decoder", transformers.AutoModelForCausalLM),
    "seq2seq": ("tiny", transformers.AutoModelForSeq2SeqLM),
}
SIZES = {"d_model": 512, "num_heads": 8, "d_ff": 2048, "num_layers": 2, "vocab_size": 4000}


def digest(*tensors: torch.Tensor) -> str:
    sha = hashlib.sha256()
    for tensor in tensors:
        sha.update(tensor.detach().contiguous().numpy().tobytes())
    return sha.hexdigest()


def measure(family: str) -> dict[str, str]:
    preset, auto_class = MODELS[family]
    torch.manual_seed(0)
    model = auto_class.from_config(aiayn.preset_config(preset, **SIZES, dropout=0.1))
    ids = torch.randint(3, SIZES["vocab_size"], (4, 64), generator=torch.Generator().manual_seed(1))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if family == "seq2seq":
        inputs["decoder_input_ids"] = ids
    results = {}
    model.eval()
    with torch.no_grad():
        results["logits"] = digest(model(**inputs).logits)
    model.train()
    torch.manual_seed(2)
    loss = model(**inputs, labels=ids).loss
    loss.backward()
    results["loss"] = digest(loss)
    results["gradient norms"] = digest(torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None]))
    if family != "encoder":
        model.eval()
        for rows in (1, 4):
            generated = model.generate(
                ids[:rows, :16],
                attention_mask=torch.ones_like(ids[:rows, :16]),
                max_new_tokens=8,
                min_new_tokens=8,
                do_sample=False,
                num_beams=1,
                output_scores=True,
                return_dict_in_generate=True,
            )
            results[f"greedy scores of {rows}"] = digest(generated.sequences, *generated.scores)
    return results


print("ready", flush=True)
sys.stdin.readline()
print(json.dumps({family: measure(family) for family in MODELS}))
