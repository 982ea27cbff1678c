"""Checkpoint averaging: the float32 mean of the weights, written as a loadable folder, and clear refusals."""

import os

import pytest
import torch
import transformers
from helpers import lm_model, padded_batch, run_script, tiny_config
from safetensors.torch import load_file

import aiayn
from aiayn import cli
from aiayn.averaging import LastCheckpointsAveraging, average_checkpoints, checkpoint_folders


def saved_checkpoints(tmp_path, count: int = 3, dtype=torch.float32, family: str = "seq2seq") -> list[str]:
    folders = []
    for seed in range(count):
        folder = tmp_path / f"checkpoint-{(seed + 1) * 10}"
        lm_model(family, seed=seed).to(dtype).save_pretrained(folder)
        folders.append(str(folder))
    return folders


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_average_is_the_float32_mean_in_the_checkpoints_dtype(dtype, tmp_path):
    folders = saved_checkpoints(tmp_path, dtype=dtype)
    averaged = average_checkpoints(folders, str(tmp_path / "averaged"))
    states = [load_file(os.path.join(folder, "model.safetensors")) for folder in folders]
    for name, tensor in averaged.items():
        expected = (sum(state[name].float() for state in states) / 3).to(dtype)
        assert tensor.dtype == dtype and torch.equal(tensor, expected), name
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "averaged")
    assert torch.equal(model.model.shared.weight, averaged["model.shared.weight"])
    assert model.lm_head.weight is model.model.shared.weight
    ids, mask = padded_batch()
    assert torch.isfinite(model(ids, attention_mask=mask, decoder_input_ids=ids).logits).all()


def test_different_models_are_refused(tmp_path):
    first = tmp_path / "small"
    lm_model("decoder").save_pretrained(first)
    wider = tmp_path / "wider"
    transformers.AutoModelForCausalLM.from_config(tiny_config("decoder", d_ff=128)).save_pretrained(wider)
    with pytest.raises(ValueError, match=r"ffn\.down_proj\.weight of shape \(32, 128\).*has \(32, 64\)"):
        average_checkpoints([str(first), str(wider)], str(tmp_path / "out"))
    encoder = tmp_path / "encoder"
    lm_model("encoder").save_pretrained(encoder)
    with pytest.raises(ValueError, match="different model families"):
        average_checkpoints([str(first), str(encoder)], str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out" / "model.safetensors")


def test_pickled_checkpoints_are_refused_unless_allowed(tmp_path):
    folders = saved_checkpoints(tmp_path, count=2)
    for folder in folders:
        state = load_file(os.path.join(folder, "model.safetensors"))
        os.remove(os.path.join(folder, "model.safetensors"))
        torch.save(state, os.path.join(folder, "pytorch_model.bin"))
    with pytest.raises(ValueError, match="pickled weights"):
        average_checkpoints(folders, str(tmp_path / "out"))
    averaged = average_checkpoints(folders, str(tmp_path / "out"), allow_pickle=True)
    assert set(os.listdir(tmp_path / "out")) >= {"model.safetensors", "config.json"}
    assert "pytorch_model.bin" not in os.listdir(tmp_path / "out")
    assert averaged


def test_the_last_checkpoints_of_a_trainer_run_from_the_command_line(tmp_path, monkeypatch, capsys):
    """`python scripts/average_checkpoints.py OUTPUT --run-dir RUN --last 3` (the script run as `__main__`, with that
    command line) averages the last 3 of a run's 4 checkpoints into a folder holding the model and its code only, and
    `aiayn average` asked for more checkpoints than the run has exits with status 2 and says why."""
    run = tmp_path / "run"
    model = aiayn.AiaynDecoderForCausalLM(tiny_config("decoder"))
    ids, mask = padded_batch()
    rows = [{"input_ids": ids[i], "attention_mask": mask[i], "labels": ids[i].masked_fill(mask[i] == 0, -100)}
            for i in range(3)]  # fmt: skip
    args = transformers.TrainingArguments(
        output_dir=str(run), max_steps=4, save_steps=1, per_device_train_batch_size=1, report_to="none",
        use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    transformers.Trainer(model=model, args=args, train_dataset=rows).train()
    assert [os.path.basename(f) for f in checkpoint_folders(str(run), 3)] == [f"checkpoint-{s}" for s in (2, 3, 4)]
    capsys.readouterr()
    run_script("scripts/average_checkpoints.py", [str(tmp_path / "avg"), "--run-dir", str(run), "--last", "3"],
               monkeypatch)  # fmt: skip
    assert capsys.readouterr().out == f"averaged 3 checkpoints into {tmp_path / 'avg'}\n"
    files = set(os.listdir(tmp_path / "avg"))
    assert {"model.safetensors", "config.json", "modeling_aiayn_decoder.py"} <= files
    assert not files & {"optimizer.pt", "scheduler.pt", "trainer_state.json", "training_args.bin", "rng_state.pth"}
    transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "avg")
    with pytest.raises(SystemExit) as too_many:
        cli.main(["average", str(tmp_path / "x"), "--run-dir", str(run), "--last", "9"])
    assert too_many.value.code == 2 and "has 4 checkpoint folders; 9 were asked for" in capsys.readouterr().err


def test_a_trainer_run_ends_with_the_mean_of_its_last_checkpoints(tmp_path):
    model = aiayn.AiaynDecoderForCausalLM(tiny_config("decoder"))
    ids, mask = padded_batch()
    rows = [{"input_ids": ids[i], "attention_mask": mask[i], "labels": ids[i].masked_fill(mask[i] == 0, -100)}
            for i in range(3)]  # fmt: skip
    seen = {}

    class Record(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            seen[state.global_step] = {name: t.detach().clone() for name, t in model.state_dict().items()}

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=7, per_device_train_batch_size=1, learning_rate=1e-2, report_to="none",
        save_strategy="no", use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    callbacks = [Record(), LastCheckpointsAveraging(count=3, every=2)]
    transformers.Trainer(model=model, args=args, train_dataset=rows, callbacks=callbacks).train()
    for name, tensor in model.state_dict().items():  # steps 2, 4 and 6; step 7 is past the last multiple of 2
        mean = (seen[2][name].float() + seen[4][name].float() + seen[6][name].float()) / 3
        assert torch.equal(tensor, mean.to(tensor.dtype)), name
    assert not torch.equal(model.state_dict()["lm_head.weight"], seen[7]["lm_head.weight"])
    with pytest.raises(ValueError, match="kept 1 checkpoints of the 3 to average: it ended at step 3 of 3"):
        args.max_steps = 3
        short = [LastCheckpointsAveraging(count=3, every=2)]
        transformers.Trainer(model=model, args=args, train_dataset=rows, callbacks=short).train()
