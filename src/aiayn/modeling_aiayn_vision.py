"""ViT-style vision models: an image cut into patches is the sequence the paper's encoder stack reads (Dosovitskiy et
al., 2021, "An Image is Worth 16x16 Words"), with ViT's class token, its classifier and its masked-image-modelling
head (SimMIM)."""

import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    ImageClassifierOutput,
    MaskedImageModelingOutput,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple

from .configuration_aiayn import AiaynVisionConfig
from .docstrings_aiayn import shared_arguments
from .heads_aiayn import AiaynClassificationHead, AiaynPooler, carried_fields
from .losses_aiayn import sequence_classification_loss
from .modeling_aiayn import AiaynPreTrainedModel, AiaynStack
from .positions_aiayn import AiaynSinusoidalPositionEmbedding


class AiaynVisionPreTrainedModel(AiaynPreTrainedModel):
    """The base of the vision family's models: their config (`AiaynVisionConfig`), the Auto classes that build them
    (`auto_classes`) and ViT's initialisation of the patch projection, the class token and the positions.

    Examples:
        >>> from transformers import AutoModelForImageClassification
        >>> from aiayn import AiaynVisionPreTrainedModel, preset_config
        >>> model = AutoModelForImageClassification.from_config(preset_config("tiny-vision"))
        >>> type(model).__name__, isinstance(model, AiaynVisionPreTrainedModel)
        ('AiaynVisionForImageClassification', True)
    """

    config: AiaynVisionConfig
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    description = "ViT-style vision Transformer"
    pretraining_auto_class = "AutoModelForMaskedImageModeling"
    lora_target_modules = ["qkv_proj"]  # PEFT's defaults (`name_tables_aiayn`)
    # Auto class -> model class of this family; `save_pretrained` writes all of them into config.json's auto_map.
    auto_classes = {
        "AutoModel": "AiaynVisionModel",
        "AutoModelForImageClassification": "AiaynVisionForImageClassification",
        "AutoModelForMaskedImageModeling": "AiaynVisionForMaskedImageModeling",
    }

    def _init_weights(self, module: nn.Module):
        """ViT's: the patch projection like a linear layer, the class token and learned positions from a truncated
        normal, the mask token at zero."""
        super()._init_weights(module)
        std = self.config.initializer_range
        if isinstance(module, AiaynPatchEmbeddings):
            init.trunc_normal_(module.projection.weight, mean=0.0, std=std)
            init.zeros_(module.projection.bias)
        elif isinstance(module, AiaynVisionEmbeddings):
            for parameter in (module.cls_token, module.position_embeddings):
                if parameter is not None:
                    init.trunc_normal_(parameter, mean=0.0, std=std)
            if module.mask_token is not None:
                init.zeros_(module.mask_token)


class AiaynPatchEmbeddings(nn.Module):
    """Each `patch_size` x `patch_size` patch of the image projected to d_model, by a convolution whose stride is its
    kernel (ViT's): `(batch, channels, height, width)` pixels to `(batch, patches, d_model)`, patches in row-major
    order."""

    def __init__(self, config: AiaynVisionConfig):
        super().__init__()
        self.num_channels, self.patch_size = config.num_channels, config.patch_size
        self.projection = nn.Conv2d(
            config.num_channels, config.d_model, kernel_size=config.patch_size, stride=config.patch_size
        )

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.projection(pixel_values).flatten(2).transpose(1, 2)


class AiaynVisionEmbeddings(nn.Module):
    """The sequence the stack reads: the patches' embeddings (with `bool_masked_pos`, masked patches replaced by a
    learned mask token, for masked-image modelling), after a learned class token (`pooling="cls"`), plus the position
    encodings, then dropout.

    Positions: `learned` is ViT's table of one vector per position, its patch part interpolated bicubically for a grid
    of another size; `sinusoidal` the paper's encodings of the position index (section 3.5); `sinusoidal_2d` those of
    the patch's row in the first half of the channels and of its column in the second (the class token gets none).
    Both sinusoids are computed for any grid."""

    def __init__(self, config: AiaynVisionConfig, use_mask_token: bool = False):
        super().__init__()
        self.config = config
        self.patch_embeddings = AiaynPatchEmbeddings(config)
        d_model = config.d_model
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model)) if config.pooling == "cls" else None
        self.mask_token = nn.Parameter(torch.zeros(1, 1, d_model)) if use_mask_token else None
        positions = config.position_embedding_type
        leading = 1 if self.cls_token is not None else 0
        table = torch.zeros(1, leading + config.grid_size**2, d_model)
        self.position_embeddings = nn.Parameter(table) if positions == "learned" else None
        sinusoid_width = {"sinusoidal": d_model, "sinusoidal_2d": d_model // 2}.get(positions)
        self.sinusoids = AiaynSinusoidalPositionEmbedding(sinusoid_width) if sinusoid_width else None
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        pixel_values: torch.Tensor,
        bool_masked_pos: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
    ) -> torch.Tensor:
        self._check_pixels(pixel_values, bool(interpolate_pos_encoding))
        batch_size, _, height, width = pixel_values.shape
        embeddings = self.patch_embeddings(pixel_values.to(self.patch_embeddings.projection.weight.dtype))
        if bool_masked_pos is not None:
            if self.mask_token is None:
                raise ValueError("bool_masked_pos needs a mask token: use AiaynVisionForMaskedImageModeling.")
            if tuple(bool_masked_pos.shape) != tuple(embeddings.shape[:2]):
                raise ValueError(
                    f"bool_masked_pos has shape {tuple(bool_masked_pos.shape)}, but the images have "
                    f"{embeddings.shape[1]} patches: shape {tuple(embeddings.shape[:2])}."
                )
            masked = bool_masked_pos.unsqueeze(-1).type_as(embeddings)
            embeddings = embeddings * (1.0 - masked) + self.mask_token.to(embeddings.dtype) * masked
        if self.cls_token is not None:
            embeddings = torch.cat((self.cls_token.expand(batch_size, -1, -1).to(embeddings.dtype), embeddings), dim=1)
        positions = self.positions(height // self.config.patch_size, width // self.config.patch_size)
        if positions is not None:
            embeddings = embeddings + positions.to(embeddings.dtype)
        return self.dropout(embeddings)

    def _check_pixels(self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool):
        """The images' channels are the config's; their sides are the config's `image_size`, or, with
        `interpolate_pos_encoding`, any multiple of `patch_size`."""
        config = self.config
        if pixel_values.dim() != 4 or pixel_values.shape[1] != config.num_channels:
            raise ValueError(
                f"pixel_values have shape {tuple(pixel_values.shape)}; the model reads (batch, {config.num_channels}, "
                f"height, width) images: num_channels={config.num_channels}."
            )
        height, width = pixel_values.shape[2:]
        if interpolate_pos_encoding:
            if height % config.patch_size or width % config.patch_size:
                raise ValueError(
                    f"The images are {height} x {width} pixels, which patches of {config.patch_size} do not tile: "
                    f"resize them to multiples of patch_size={config.patch_size}."
                )
        elif (height, width) != (config.image_size, config.image_size):
            raise ValueError(
                f"The images are {height} x {width} pixels, the model's {config.image_size} x {config.image_size} "
                "(image_size): resize them, or pass interpolate_pos_encoding=True to read another size."
            )

    def positions(self, rows: int, columns: int) -> torch.Tensor | None:
        """The `(1, sequence, d_model)` position encodings of a `rows` x `columns` grid of patches (after the class
        token), None without positions."""
        kind, grid = self.config.position_embedding_type, self.config.grid_size
        leading = 1 if self.cls_token is not None else 0
        if kind == "learned":
            if (rows, columns) == (grid, grid):
                return self.position_embeddings
            table = self.position_embeddings[:, leading:].reshape(1, grid, grid, -1).permute(0, 3, 1, 2)
            table = nn.functional.interpolate(table, size=(rows, columns), mode="bicubic", align_corners=False)
            return torch.cat((self.position_embeddings[:, :leading], table.permute(0, 2, 3, 1).flatten(1, 2)), dim=1)
        if kind == "sinusoidal":
            device = self.sinusoids.inv_freq.device
            return self.sinusoids(torch.arange(leading + rows * columns, device=device)[None])
        if kind == "sinusoidal_2d":
            device = self.sinusoids.inv_freq.device
            row, column = torch.meshgrid(
                torch.arange(rows, device=device), torch.arange(columns, device=device), indexing="ij"
            )
            table = torch.cat((self.sinusoids(row.reshape(1, -1)), self.sinusoids(column.reshape(1, -1))), dim=-1)
            return nn.functional.pad(table, (0, 0, leading, 0))
        return None


class AiaynVisionModel(AiaynVisionPreTrainedModel):
    """The encoder stack over an image's patches (a ViT).

    With `add_pooling_layer`, also the pooled first position (ViT's pooler: dense and tanh over the class token's final
    state).

    Args:
        config: The model's config.
        add_pooling_layer: Add ViT's pooler (with `config.pooling == "cls"` only).
        use_mask_token: Learn a mask token that replaces the patches of `bool_masked_pos` (masked-image modelling).

    Examples:
        >>> import torch
        >>> from aiayn import AiaynVisionModel, preset_config
        >>> config = preset_config("tiny-vision")  # 32 x 32 images in 4 x 4 patches, d_model 64
        >>> model = AiaynVisionModel(config).eval()
        >>> outputs = model(pixel_values=torch.rand(2, 3, 32, 32))
        >>> outputs.last_hidden_state.shape, outputs.pooler_output.shape  # the class token and 8 x 8 patches
        (torch.Size([2, 65, 64]), torch.Size([2, 64]))
    """

    def __init__(self, config: AiaynVisionConfig, add_pooling_layer: bool = True, use_mask_token: bool = False):
        super().__init__(config)
        self.embeddings = AiaynVisionEmbeddings(config, use_mask_token)
        self.encoder = AiaynStack(config, None, config.num_layers, is_causal=False)
        self.pooler = AiaynPooler(config) if add_pooling_layer and config.pooling == "cls" else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.patch_embeddings

    @can_return_tuple
    @shared_arguments
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        bool_masked_pos: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPooling:
        """Encodes a batch of images.

        Args:
            bool_masked_pos: Patches replaced by the mask token, of shape `(batch_size, num_patches)` (masked-image
                modelling; needs `use_mask_token`).

        Returns:
            A `BaseModelOutputWithPooling` with `last_hidden_state`, `pooler_output` (with the pooler) and, when asked
                for, `hidden_states` and `attentions`.
        """
        if pixel_values is None:
            raise ValueError("Specify pixel_values.")
        embedded = self.embeddings(pixel_values, bool_masked_pos, interpolate_pos_encoding)
        outputs = self.encoder(inputs_embeds=embedded, **kwargs)
        pooled = self.pooler(outputs.last_hidden_state) if self.pooler is not None else None
        return BaseModelOutputWithPooling(pooler_output=pooled, **carried_fields(outputs, BaseModelOutputWithPooling))


class AiaynVisionForImageClassification(AiaynVisionPreTrainedModel):
    """A class for each image, from the final state of its class token (ViT) or the mean of its patches'.

    Examples:
        >>> import torch
        >>> from aiayn import AiaynVisionForImageClassification, preset_config
        >>> model = AiaynVisionForImageClassification(preset_config("tiny-vision", num_labels=4)).eval()
        >>> outputs = model(pixel_values=torch.rand(2, 3, 32, 32), labels=torch.tensor([0, 3]))
        >>> outputs.logits.shape, outputs.loss.shape
        (torch.Size([2, 4]), torch.Size([]))
        >>> model(pixel_values=torch.rand(1, 3, 48, 48), interpolate_pos_encoding=True).logits.shape  # another size
        torch.Size([1, 4])
    """

    def __init__(self, config: AiaynVisionConfig):
        super().__init__(config)
        self.model = AiaynVisionModel(config, add_pooling_layer=False)
        self.classifier = AiaynClassificationHead(config, config.num_labels)
        self.post_init()

    @can_return_tuple
    @shared_arguments
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ImageClassifierOutput:
        """Scores each image's classes.

        Args:
            labels: Class indices of shape `(batch_size,)`, or float targets for regression (`num_labels == 1`) and
                multi-label classification.

        Returns:
            An `ImageClassifierOutput` with `loss` (given `labels`), `logits` of shape `(batch_size, num_labels)`, and
                what the base model returned (hidden states, attentions, cache).
        """
        outputs = self.model(pixel_values, interpolate_pos_encoding=interpolate_pos_encoding, **kwargs)
        states = outputs.last_hidden_state
        logits = self.classifier(states[:, 0] if self.config.pooling == "cls" else states.mean(dim=1))
        loss = sequence_classification_loss(logits, labels, self.config, **kwargs) if labels is not None else None
        return ImageClassifierOutput(loss=loss, logits=logits, **carried_fields(outputs, ImageClassifierOutput))


class AiaynVisionForMaskedImageModeling(AiaynVisionPreTrainedModel):
    """Masked-image modelling (SimMIM, as transformers' `ViTForMaskedImageModeling`): masked patches enter as a learned
    mask token, and a 1x1 convolution and a pixel shuffle turn every patch's final state back into its pixels. The loss
    is the mean absolute error over the masked pixels.

    Examples:
        >>> import torch
        >>> from aiayn import AiaynVisionForMaskedImageModeling, preset_config
        >>> model = AiaynVisionForMaskedImageModeling(preset_config("tiny-vision")).eval()  # 8 x 8 patches
        >>> bool_masked_pos = torch.arange(64).remainder(2).bool().unsqueeze(0)  # every other patch
        >>> outputs = model(pixel_values=torch.rand(1, 3, 32, 32), bool_masked_pos=bool_masked_pos)
        >>> outputs.reconstruction.shape, outputs.loss.shape  # the image's pixels; the error on the masked ones
        (torch.Size([1, 3, 32, 32]), torch.Size([]))
    """

    def __init__(self, config: AiaynVisionConfig):
        super().__init__(config)
        self.model = AiaynVisionModel(config, add_pooling_layer=False, use_mask_token=True)
        self.decoder = nn.Sequential(
            nn.Conv2d(config.d_model, config.encoder_stride**2 * config.num_channels, kernel_size=1),
            nn.PixelShuffle(config.encoder_stride),
        )
        self.post_init()

    @can_return_tuple
    @shared_arguments
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        bool_masked_pos: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MaskedImageModelingOutput:
        """Reconstructs the pixels of every patch.

        Args:
            bool_masked_pos: The masked patches (True), of shape `(batch_size, num_patches)`; the loss scores their
                reconstruction.

        Returns:
            A `MaskedImageModelingOutput` with `loss` (given `bool_masked_pos`), `reconstruction` of the images' shape,
                and what the base model returned (hidden states, attentions, cache).
        """
        config = self.config
        if bool_masked_pos is not None and config.patch_size != config.encoder_stride:
            raise ValueError(
                f"With bool_masked_pos, patch_size ({config.patch_size}) must equal encoder_stride "
                f"({config.encoder_stride}), so that the reconstruction has the image's size."
            )
        outputs = self.model(pixel_values, bool_masked_pos, interpolate_pos_encoding, **kwargs)
        patches = outputs.last_hidden_state[:, 1:] if config.pooling == "cls" else outputs.last_hidden_state
        rows, columns = (side // config.patch_size for side in pixel_values.shape[2:])
        reconstruction = self.decoder(patches.transpose(1, 2).reshape(len(patches), -1, rows, columns))
        loss = None
        if bool_masked_pos is not None:
            masked = bool_masked_pos.reshape(-1, rows, columns).repeat_interleave(config.patch_size, 1)
            masked = masked.repeat_interleave(config.patch_size, 2).unsqueeze(1).type_as(reconstruction)
            error = nn.functional.l1_loss(pixel_values.type_as(reconstruction), reconstruction, reduction="none")
            loss = (error * masked).sum() / (masked.sum() + 1e-5) / config.num_channels
        return MaskedImageModelingOutput(
            loss=loss, reconstruction=reconstruction, **carried_fields(outputs, MaskedImageModelingOutput)
        )


__all__ = [
    "AiaynVisionPreTrainedModel",
    "AiaynVisionModel",
    "AiaynVisionForImageClassification",
    "AiaynVisionForMaskedImageModeling",
]
