"""Checkpoint averaging (section 6.1: the base models average the last 5 checkpoints, the big ones the last 20).

`average_checkpoints(folders, output)` averages the weights of checkpoints of one model, saved by `save_pretrained`
or by the Trainer (`checkpoint-<step>` folders), in float32, and writes a folder that loads like the last one: its
config, generation config, tokenizer and modeling code, with the averaged `model.safetensors`.
`LastCheckpointsAveraging` does the same within a `Trainer` run, from weights it keeps in memory.
"""

import json
import os
import re
import shutil
import tempfile

import torch
import transformers
from safetensors.torch import load_file, save_file

WEIGHTS, INDEX, PICKLED = "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"
# Trainer state that belongs to a training run, not to the averaged model.
RUN_STATE = re.compile(r"^(optimizer\.pt|scheduler\.pt|rng_state.*\.pth|trainer_state\.json|training_args\.bin)$")


def checkpoint_folders(run_dir: str, last: int) -> list[str]:
    """The `last` most recent `checkpoint-<step>` folders of a Trainer run, oldest first."""
    steps = sorted(
        (int(match.group(1)), name)
        for name in os.listdir(run_dir)
        if (match := re.fullmatch(r"checkpoint-(\d+)", name)) and os.path.isdir(os.path.join(run_dir, name))
    )
    if len(steps) < last:
        raise ValueError(f"{run_dir} has {len(steps)} checkpoint folders; {last} were asked for.")
    return [os.path.join(run_dir, name) for _, name in steps[-last:]]


def load_weights(folder: str, allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """The state dict saved in `folder` (one safetensors file or shards). Pickled weights run code when loaded: they
    are read only with `allow_pickle`, and then with `torch.load(weights_only=True)`."""
    if os.path.isfile(os.path.join(folder, WEIGHTS)):
        return load_file(os.path.join(folder, WEIGHTS))
    if os.path.isfile(os.path.join(folder, INDEX)):
        with open(os.path.join(folder, INDEX)) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return {name: tensor for shard in shards for name, tensor in load_file(os.path.join(folder, shard)).items()}
    if os.path.isfile(os.path.join(folder, PICKLED)):
        if not allow_pickle:
            raise ValueError(
                f"{folder} holds only pickled weights ({PICKLED}); they are read only with allow_pickle=True "
                "(--allow-pickle), and then with torch.load(weights_only=True)."
            )
        return torch.load(os.path.join(folder, PICKLED), map_location="cpu", weights_only=True)
    raise ValueError(f"{folder} holds no model weights ({WEIGHTS}, {INDEX} or {PICKLED}).")


def _is_weights_file(name: str) -> bool:
    return name in (WEIGHTS, INDEX, PICKLED) or (name.startswith("model-") and name.endswith(".safetensors"))


def _model_type(folder: str) -> str | None:
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f).get("model_type")


def average_weights(states: list[dict[str, torch.Tensor]], names: list[str]) -> dict[str, torch.Tensor]:
    """The element-wise mean of `states`, accumulated in float32 and returned in each tensor's own dtype. Raises
    `ValueError` naming the first checkpoint whose tensor names, shapes or dtypes differ from the first one's."""
    reference = states[0]
    for state, name in zip(states[1:], names[1:], strict=True):
        if state.keys() != reference.keys():
            differing = sorted(state.keys() ^ reference.keys())[:5]
            raise ValueError(f"{name} has other weights than {names[0]}: {differing} ...")
        for key, tensor in state.items():
            if tensor.shape != reference[key].shape or tensor.dtype != reference[key].dtype:
                raise ValueError(
                    f"{name} has {key} of shape {tuple(tensor.shape)} ({tensor.dtype}); {names[0]} has "
                    f"{tuple(reference[key].shape)} ({reference[key].dtype}): checkpoints of different models."
                )
    averaged = {}
    for key, tensor in reference.items():
        if not tensor.is_floating_point():  # integer buffers are not averaged: they must agree
            averaged[key] = tensor
            continue
        total = torch.zeros(tensor.shape, dtype=torch.float32)
        for state in states:
            total += state[key].float()
        averaged[key] = (total / len(states)).to(tensor.dtype)
    return averaged


class LastCheckpointsAveraging(transformers.TrainerCallback):
    """Section 6.1's averaging within a `Trainer` run: keeps the weights every `every` steps over the run's last
    `count * every` steps and loads their mean (`average_weights`) into the model when training ends, so that the
    evaluation and the saved folder are the averaged model's. Nothing is written: the paper's checkpoints written at
    intervals, without the disk."""

    def __init__(self, count: int, every: int):
        if count < 2 or every < 1:
            raise ValueError(f"averaging needs 2 or more checkpoints 1 or more steps apart, not {count} every {every}")
        self.count, self.every, self.kept = count, every, {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0 and state.global_step > state.max_steps - self.count * self.every:
            self.kept[state.global_step] = {name: t.detach().clone() for name, t in model.state_dict().items()}

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if len(self.kept) < self.count:
            raise ValueError(
                f"the run kept {len(self.kept)} checkpoints of the {self.count} to average: it ended at step "
                f"{state.global_step} of {state.max_steps}."
            )
        steps = sorted(self.kept)
        model.load_state_dict(average_weights([self.kept[s] for s in steps], [f"step {s}" for s in steps]))
        self.kept.clear()


def average_checkpoints(folders: list[str], output: str, allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """Averages the weights of checkpoints of one model into a new folder (see the module docstring).

    The weights are written to a temporary file and moved into place, so that `output` never holds a half-written
    checkpoint.

    Args:
        folders: At least two checkpoint folders of one model, saved by `save_pretrained` or by the Trainer
            (`checkpoint-<step>`).
        output: The folder to write; it gets the last checkpoint's config, generation config, tokenizer and modeling
            code, with the averaged `model.safetensors`.
        allow_pickle: Also read pickled weights (`pytorch_model.bin`).

    Returns:
        The averaged state dict, each tensor in its checkpoints' dtype (the mean is taken in float32).

    Raises:
        ValueError: With fewer than two folders, or checkpoints of different model families.
    """
    if len(folders) < 2:
        raise ValueError("Averaging needs at least two checkpoints.")
    model_types = {folder: _model_type(folder) for folder in folders}
    if len(set(model_types.values())) > 1:
        raise ValueError(f"The checkpoints are of different model families: {model_types}.")
    averaged = average_weights([load_weights(folder, allow_pickle) for folder in folders], folders)

    os.makedirs(output, exist_ok=True)
    last = folders[-1]
    for name in os.listdir(last):
        source = os.path.join(last, name)
        if os.path.isfile(source) and not RUN_STATE.match(name) and not _is_weights_file(name):
            shutil.copyfile(source, os.path.join(output, name))
    descriptor, temporary = tempfile.mkstemp(dir=output, suffix=".safetensors.tmp")
    os.close(descriptor)
    try:
        save_file({k: v.contiguous() for k, v in averaged.items()}, temporary, metadata={"format": "pt"})
        os.replace(temporary, os.path.join(output, WEIGHTS))
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return averaged
