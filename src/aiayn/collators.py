"""Data collators: T5's span-corruption objective (transformers has none), the masks of masked-image modelling, and
random collators made resumable.

Random choices made while collating (masked positions, noise spans) are drawn from a generator seeded by the
training seed and the batch's token ids, never from a running random state: the Trainer's dataloader collates a
batch ahead of the step, and a resumed run skips the batches before its checkpoint without collating them, so
running state would leave a resumed run with other masks (and, through the global generator, other dropout) than
the uninterrupted one. Seeded by the batch, a resumed run is bit-exact, evaluation masks the same tokens every
time, and masking stays dynamic: the shuffled batches, and so their masks, differ from epoch to epoch.

Span corruption: each block of `tokens_length` tokens is split into alternating kept and noise spans (15% noise,
spans of 3 tokens on average, as in T5, section 3.1.4 of Raffel et al. 2020). The encoder reads the kept tokens
with each noise span replaced by one sentinel (`<extra_id_0>`, `<extra_id_1>`, ...); the decoder predicts each
sentinel followed by the tokens it replaced. Both end with EOS.
"""

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .tokenization import sentinel


def span_corruption_lengths(input_length: int, noise_density: float, mean_span_length: float) -> tuple[int, int]:
    """`(tokens_length, target_length)`: the longest raw block whose corrupted input (kept tokens, one sentinel per
    noise span, EOS) fits `input_length`, and the length of its target (T5's `compute_input_and_target_lengths`)."""

    def corrupted_lengths(tokens_length: int) -> tuple[int, int]:
        noise = int(round(tokens_length * noise_density))
        spans = int(round(noise / mean_span_length))
        return tokens_length - noise + spans + 1, noise + spans + 1

    tokens_length = input_length
    while corrupted_lengths(tokens_length + 1)[0] <= input_length:
        tokens_length += 1
    return tokens_length, corrupted_lengths(tokens_length)[1]


def batch_seed(seed: int, examples: list[dict], key: str = "input_ids") -> int:
    """A 63-bit seed that is a function of `seed` and the values `examples[i][key]` only (token ids, pixels)."""
    digest = hashlib.blake2b(str(seed).encode(), digest_size=8)
    for example in examples:
        values = torch.as_tensor(example[key])
        digest.update(values.numel().to_bytes(8, "little") + values.numpy().tobytes())
    return int.from_bytes(digest.digest(), "little") >> 1


@dataclass
class DataCollatorForMaskedImageModeling:
    """Stacks the examples' `pixel_values` and draws `bool_masked_pos`: `mask_ratio` of each image's `num_patches`
    patches, uniformly, from a generator seeded by `seed` and the batch's pixels (see the module docstring). Labels,
    where the examples have them, are left out: the objective is the pixels."""

    num_patches: int
    mask_ratio: float = 0.5
    seed: int = 0

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(batch_seed(self.seed, examples, "pixel_values"))
        pixels = torch.stack([torch.as_tensor(example["pixel_values"]) for example in examples])
        order = torch.rand(len(examples), self.num_patches, generator=generator).argsort(dim=-1)
        count = max(1, round(self.num_patches * self.mask_ratio))
        masked = torch.zeros(len(examples), self.num_patches, dtype=torch.bool).scatter(1, order[:, :count], True)
        return {"pixel_values": pixels, "bool_masked_pos": masked}


@dataclass
class DataCollatorSeededByBatch:
    """Runs `collator`, which draws from torch's global generator (transformers' `DataCollatorForLanguageModeling`),
    with that generator seeded by `batch_seed(seed, examples)` and restored afterwards: the masks become a function
    of the batch (see the module docstring), and the draws of the training step (dropout) are left untouched."""

    collator: Callable[[list[dict]], dict]
    seed: int = 0

    def __call__(self, examples: list[dict]) -> dict:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(batch_seed(self.seed, examples))
            return self.collator(examples)


def random_segmentation(num_items: int, num_segments: int, generator: torch.Generator) -> torch.Tensor:
    """`num_segments` positive lengths that add up to `num_items`, uniformly among all such compositions."""
    cuts = torch.randperm(num_items - 1, generator=generator)[: num_segments - 1].sort().values + 1
    bounds = torch.cat((torch.tensor([0]), cuts, torch.tensor([num_items])))
    return bounds.diff()


def random_spans_noise_mask(
    length: int, noise_density: float, mean_span_length: float, generator: torch.Generator
) -> torch.Tensor:
    """A boolean mask of `length` positions: alternating kept and noise spans, starting with a kept one."""
    num_noise = min(max(int(round(length * noise_density)), 1), length - 1)
    num_kept = length - num_noise
    num_spans = max(int(round(min(num_noise, num_kept) / mean_span_length)), 1)
    noise_lengths = random_segmentation(num_noise, num_spans, generator)
    kept_lengths = random_segmentation(num_kept, num_spans, generator)
    span_lengths = torch.stack((kept_lengths, noise_lengths), dim=1).flatten()
    return torch.tensor([False, True]).repeat(num_spans).repeat_interleave(span_lengths)


@dataclass
class DataCollatorForSpanCorruption:
    """Turns equal-length blocks of token ids (`input_ids`) into T5 span-corruption examples: `input_ids`,
    `attention_mask` and `labels` (the model builds its decoder inputs from the labels). The spans are drawn from a
    generator seeded by `seed` and the batch (see the module docstring)."""

    tokenizer: PreTrainedTokenizerBase
    noise_density: float = 0.15
    mean_span_length: float = 3.0
    seed: int = 0
    model: PreTrainedModel | None = None  # when given, also `decoder_input_ids` (needed under label smoothing)

    def __post_init__(self):
        self.eos_token_id = self.tokenizer.eos_token_id

    def sentinel_id(self, index: int) -> int:
        token_id = self.tokenizer.convert_tokens_to_ids(sentinel(index))
        if token_id is None or token_id == self.tokenizer.unk_token_id:
            raise ValueError(f"The tokenizer has no sentinel {sentinel(index)}: span corruption needs T5 sentinels.")
        return token_id

    def corrupt(self, tokens: list[int], generator: torch.Generator) -> tuple[list[int], list[int]]:
        noise = random_spans_noise_mask(len(tokens), self.noise_density, self.mean_span_length, generator)
        inputs, targets, span = [], [], 0
        for position, (token, is_noise) in enumerate(zip(tokens, noise.tolist(), strict=True)):
            if not is_noise:
                inputs.append(token)
                continue
            if position == 0 or not noise[position - 1]:
                inputs.append(self.sentinel_id(span))
                targets.append(self.sentinel_id(span))
                span += 1
            targets.append(token)
        return inputs + [self.eos_token_id], targets + [self.eos_token_id]

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(batch_seed(self.seed, examples))
        pairs = [self.corrupt(list(example["input_ids"]), generator) for example in examples]
        inputs, labels = torch.tensor([pair[0] for pair in pairs]), torch.tensor([pair[1] for pair in pairs])
        batch = {"input_ids": inputs, "attention_mask": torch.ones_like(inputs), "labels": labels}
        if self.model is not None:
            batch["decoder_input_ids"] = self.model.prepare_decoder_input_ids_from_labels(labels)
        return batch
