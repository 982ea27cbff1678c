"""The vision family (`aiayn_vision`): images as sequences of patches for the shared encoder stack, with ViT's
classifier, masked-image modelling, transformers' image processor, Trainer, pipeline and remote code."""

import math
import subprocess
import sys

import datasets
import numpy as np
import onnx
import onnxruntime
import pytest
import torch
import transformers
from helpers import hub_loading_environment
from huggingface_hub.errors import StrictDataclassError
from PIL import Image
from torch.utils._pytree import tree_leaves

import aiayn
from aiayn.hub import save_hub_folder

POSITIONS = ("learned", "sinusoidal", "sinusoidal_2d", "none")
BAR_FIELDS = {"image_size": 32, "patch_size": 4, "num_channels": 3, "d_model": 64, "num_heads": 4, "d_ff": 128,
              "num_layers": 2, "num_labels": 10}  # fmt: skip


def vision_config(**overrides) -> aiayn.AiaynVisionConfig:
    """16 x 16 images in patches of 4 (a grid of 4 x 4), 32 wide, 2 layers, 3 classes."""
    fields = {"image_size": 16, "patch_size": 4, "d_model": 32, "num_heads": 4, "d_ff": 64, "num_layers": 2}
    return aiayn.preset_config("tiny-vision", **{**fields, "num_labels": 3, **overrides})


def classifier(implementation: str = "sdpa", seed: int = 0, **overrides):
    torch.manual_seed(seed)
    config = vision_config(**overrides)
    return transformers.AutoModelForImageClassification.from_config(config, attn_implementation=implementation).eval()


def images(batch: int = 3, side: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, 3, side, side, generator=torch.Generator().manual_seed(seed))


def quadrant_images(count: int, side: int = 32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise with one bright quadrant; the label is the quadrant (a task a ViT learns in a few dozen steps)."""
    generator = torch.Generator().manual_seed(seed)
    pixels = torch.randn(count, 3, side, side, generator=generator) * 0.5
    labels = torch.randint(0, 4, (count,), generator=generator)
    half = side // 2
    for index, label in enumerate(labels.tolist()):
        row, column = divmod(label, 2)
        pixels[index, :, row * half : (row + 1) * half, column * half : (column + 1) * half] += 2.0
    return pixels, labels


def test_the_issues_config_trains_on_pixel_values_with_the_trainer(tmp_path):
    """The Auto classes build the family from `AutoConfig.for_model`; the Trainer keeps `pixel_values` (a forward
    argument) and the loss falls on a learnable task."""
    config = transformers.AutoConfig.for_model("aiayn_vision", **BAR_FIELDS)
    torch.manual_seed(0)
    model = transformers.AutoModelForImageClassification.from_config(config)
    assert type(model).__name__ == "AiaynVisionForImageClassification"
    pixels, labels = quadrant_images(256)
    dataset = datasets.Dataset.from_dict({"pixel_values": pixels.numpy(), "labels": labels.numpy()})
    dataset.set_format("torch")
    arguments = transformers.TrainingArguments(
        tmp_path, max_steps=40, per_device_train_batch_size=32, learning_rate=3e-3, logging_steps=10, report_to=[],
        use_cpu=True, seed=0,
    )  # fmt: skip
    trainer = transformers.Trainer(model, arguments, train_dataset=dataset)
    assert tuple(next(iter(trainer.get_train_dataloader()))["pixel_values"].shape) == (32, 3, 32, 32)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[0] > 1.2 and losses[-1] < 0.5 * losses[0], losses  # from chance (ln 4 = 1.39) down


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_every_position_type_and_pooling_reads_other_sizes_with_interpolation(position, pooling):
    model = classifier(position_embedding_type=position, pooling=pooling)
    with torch.no_grad():
        assert model(pixel_values=images()).logits.shape == (3, 3)
        assert model(pixel_values=images(side=24), interpolate_pos_encoding=True).logits.shape == (3, 3)
        rectangular = torch.randn(2, 3, 8, 20)
        assert model(pixel_values=rectangular, interpolate_pos_encoding=True).logits.shape == (2, 3)


def test_2d_sinusoids_encode_the_row_in_the_first_half_and_the_column_in_the_second():
    model = classifier(position_embedding_type="sinusoidal_2d")
    table = model.model.embeddings.positions(2, 3)[0]  # the class token, then 6 patches in row-major order
    half = 16
    assert torch.equal(table[0], torch.zeros(32))
    patches = table[1:].reshape(2, 3, 32)
    assert torch.equal(patches[0, :, :half], patches[0, :1, :half].expand(3, -1))  # one row: one row encoding
    assert torch.equal(patches[:, 0, half:], patches[:1, 0, half:].expand(2, -1))  # one column: one column encoding
    assert not torch.equal(patches[0, 0, :half], patches[1, 0, :half])
    # The paper's sinusoids of position 1 over 16 channels: sin(1 / 10000^(2i/16)), cos(...) interleaved.
    angles = 1 / 10000 ** (torch.arange(0, half, 2) / half)
    expected = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten()
    torch.testing.assert_close(patches[1, 0, :half], expected)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_learned_positions_of_another_grid_are_torchs_bicubic_interpolation_of_the_table(pooling):
    """For a grid of 6 x 5 patches, the learned table of the 4 x 4 grid is read as an image of d_model channels (patch
    (i, j) at row i, column j), resized by `torch.nn.functional.interpolate(mode="bicubic")`, and read out row by row;
    the class token's vector stays as it is. The model's positions are exactly that, and a forward adds them."""
    model = classifier(pooling=pooling)
    embeddings = model.model.embeddings
    with torch.no_grad():
        embeddings.position_embeddings.normal_(generator=torch.Generator().manual_seed(3))
    table, leading = embeddings.position_embeddings[0], 1 if pooling == "cls" else 0
    grid = torch.empty(32, 4, 4)
    for row in range(4):
        for column in range(4):
            grid[:, row, column] = table[leading + 4 * row + column]
    resized = torch.nn.functional.interpolate(grid[None], size=(6, 5), mode="bicubic", align_corners=False)[0]
    expected = [table[0]] if leading else []
    expected += [resized[:, row, column] for row in range(6) for column in range(5)]
    with torch.no_grad():
        positions = embeddings.positions(6, 5)
        assert torch.equal(positions[0], torch.stack(expected))
        assert torch.equal(embeddings.positions(4, 4), embeddings.position_embeddings)  # its own grid: the table
        pixels = torch.randn(1, 3, 24, 20, generator=torch.Generator().manual_seed(4))  # a grid of 6 x 5
        patches = embeddings.patch_embeddings(pixels)
        if leading:
            patches = torch.cat((embeddings.cls_token, patches), dim=1)
        torch.testing.assert_close(
            embeddings(pixels, interpolate_pos_encoding=True), patches + positions, rtol=0, atol=0
        )


@pytest.mark.parametrize("position", ["learned", "sinusoidal_2d"])
def test_eager_sdpa_and_flex_attention_agree(position):
    pixels = images()
    logits = {}
    for implementation in ("eager", "sdpa", "flex_attention"):
        with torch.no_grad():
            logits[implementation] = classifier(implementation, position_embedding_type=position)(pixels).logits
    torch.testing.assert_close(logits["sdpa"], logits["eager"], rtol=0, atol=1e-6)
    torch.testing.assert_close(logits["flex_attention"], logits["eager"], rtol=0, atol=1e-5)


def test_gradient_checkpointing_gives_the_same_gradients():
    pixels, labels = images(), torch.tensor([0, 1, 2])
    gradients = []
    for checkpointing in (False, True):
        model = classifier().train()
        if checkpointing:
            model.gradient_checkpointing_enable()
        model(pixel_values=pixels, labels=labels).loss.backward()
        gradients.append({name: parameter.grad for name, parameter in model.named_parameters()})
    torch.testing.assert_close(gradients[1], gradients[0], rtol=0, atol=0)


def test_masked_image_modelling_scores_the_masked_pixels_and_its_body_fine_tunes():
    """The loss is the mean absolute error over the masked patches' pixels (per channel), as ViT's; the pretrained
    body loads into a classifier, whose new head is initialised."""
    torch.manual_seed(0)
    model = transformers.AutoModelForMaskedImageModeling.from_config(vision_config())
    pixels = images()
    masked = torch.rand(3, 16, generator=torch.Generator().manual_seed(2)) < 0.5
    outputs = model(pixel_values=pixels, bool_masked_pos=masked)
    assert outputs.reconstruction.shape == pixels.shape
    pixel_mask = masked.reshape(3, 4, 4).repeat_interleave(4, 1).repeat_interleave(4, 2)[:, None].expand(-1, 3, -1, -1)
    expected = (outputs.reconstruction - pixels).abs()[pixel_mask].mean()
    torch.testing.assert_close(outputs.loss, expected, rtol=1e-5, atol=0)
    outputs.loss.backward()
    assert model.model.embeddings.mask_token.grad.abs().sum() > 0


def test_a_pretrained_body_loads_into_the_classifier(tmp_path):
    torch.manual_seed(0)
    pretrained = transformers.AutoModelForMaskedImageModeling.from_config(vision_config())
    pretrained.save_pretrained(tmp_path)
    model = transformers.AutoModelForImageClassification.from_pretrained(tmp_path)
    body = {k: v for k, v in pretrained.model.state_dict().items() if "mask_token" not in k}
    assert all(torch.equal(model.model.state_dict()[name], tensor) for name, tensor in body.items())


def test_bad_images_are_refused_with_errors_that_name_the_problem():
    model = classifier()
    with pytest.raises(ValueError, match=r"num_channels=3"):
        model(pixel_values=torch.randn(1, 1, 16, 16))
    with pytest.raises(ValueError, match=r"12 x 12 pixels, the model's 16 x 16 .* interpolate_pos_encoding=True"):
        model(pixel_values=torch.randn(1, 3, 12, 12))
    with pytest.raises(ValueError, match=r"18 x 18 pixels, which patches of 4 do not tile"):
        model(pixel_values=torch.randn(1, 3, 18, 18), interpolate_pos_encoding=True)
    with pytest.raises(StrictDataclassError, match="image_size .* must be a multiple of patch_size"):
        vision_config(image_size=18)
    mim = transformers.AutoModelForMaskedImageModeling.from_config(vision_config())
    with pytest.raises(ValueError, match=r"bool_masked_pos has shape \(1, 5\)"):
        mim(pixel_values=torch.randn(1, 3, 16, 16), bool_masked_pos=torch.zeros(1, 5, dtype=torch.bool))


def test_compiled_exported_and_onnx_programs_give_eagers_logits():
    model = classifier(num_layers=1)  # every layer compiles and exports alike
    pixels = images()
    with torch.no_grad():
        expected = model(pixel_values=pixels).logits
        compiled = torch.compile(model, fullgraph=True)
        torch.testing.assert_close(compiled(pixel_values=pixels).logits, expected, rtol=0, atol=1e-5)
        program = torch.export.export(model, (), kwargs={"pixel_values": pixels})
        torch.testing.assert_close(tree_leaves(program.module()(pixel_values=pixels)), [expected], rtol=0, atol=0)
    exported = torch.onnx.export(model, (), kwargs={"pixel_values": pixels}, dynamo=True, verbose=False)
    onnx.checker.check_model(exported.model_proto, full_check=True)
    session = onnxruntime.InferenceSession(
        exported.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (logits,) = session.run(None, {"pixel_values": pixels.numpy()})
    torch.testing.assert_close(torch.from_numpy(logits), expected, rtol=0, atol=1e-5)


def image_processor() -> transformers.BaseImageProcessor:
    """transformers' ViT image processor for 16 x 16 images (its PIL backend where torchvision is not installed)."""
    return transformers.ViTImageProcessor(size={"height": 16, "width": 16})


def pictures(count: int = 3) -> list[Image.Image]:
    generator = np.random.default_rng(3)
    return [Image.fromarray(generator.integers(0, 256, (20, 24, 3), dtype=np.uint8)) for _ in range(count)]


REMOTE_CLASSIFIER = """
import json, sys
sys.modules["aiayn"] = None  # aiayn cannot be imported: only the folder's own code can build the model
import numpy as np, torch, transformers
from PIL import Image

folder = sys.argv[1]
generator = np.random.default_rng(3)
pictures = [Image.fromarray(generator.integers(0, 256, (20, 24, 3), dtype=np.uint8)) for _ in range(3)]
classify = transformers.pipeline("image-classification", model=folder, trust_remote_code=True)
assert type(classify.model).__module__.startswith("transformers_modules."), type(classify.model).__module__
labels = [answers[0]["label"] for answers in classify(pictures)]
model = transformers.AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True).eval()
with torch.no_grad():
    logits = model(pixel_values=torch.randn(2, 3, 48, 48), interpolate_pos_encoding=True).logits
print(json.dumps({"labels": labels, "shape": list(logits.shape)}))
"""


def test_a_saved_folder_answers_the_image_classification_pipeline_without_aiayn(tmp_path):
    """The folder holds transformers' image processor (found by `AutoImageProcessor`), the code and a card tagged
    `image-classification`; in a process where aiayn cannot be imported, `pipeline("image-classification",
    trust_remote_code=True)` gives the top labels it gives here, and 48 x 48 images run with interpolation."""
    model = classifier(id2label={0: "zero", 1: "one", 2: "two"}, label2id={"zero": 0, "one": 1, "two": 2})
    card = save_hub_folder(model, image_processor(), str(tmp_path))
    assert card.data.pipeline_tag == "image-classification"
    assert (tmp_path / "preprocessor_config.json").exists() and (tmp_path / "modeling_aiayn_vision.py").exists()
    loaded = transformers.AutoImageProcessor.from_pretrained(tmp_path)
    assert loaded.size == {"height": 16, "width": 16}
    classify = transformers.pipeline("image-classification", model=str(tmp_path))
    labels = [answers[0]["label"] for answers in classify(pictures())]
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_CLASSIFIER, str(tmp_path)],
        cwd=tmp_path.parent,
        env=hub_loading_environment(tmp_path.parent),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    remote = __import__("json").loads(result.stdout.splitlines()[-1])
    assert remote == {"labels": labels, "shape": [2, 3]}


def test_presets_give_vit_b16_and_a_tiny_model():
    with torch.device("meta"):
        base = transformers.AutoModelForImageClassification.from_config(
            aiayn.preset_config("vit-base", num_labels=1000)
        )
    assert sum(p.numel() for p in base.parameters()) == 86_567_656  # ViT-B/16 on ImageNet-1k
    tiny = aiayn.preset_config("tiny-vision")
    assert (tiny.image_size, tiny.patch_size, tiny.d_model, tiny.num_layers) == (32, 4, 64, 2)
    assert math.isclose(tiny.layer_norm_eps, 1e-12) and tiny.norm_first and tiny.hidden_act == "gelu"
