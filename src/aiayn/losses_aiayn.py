"""The losses of aiayn's heads, as transformers defines them (the same values and gradients as its loss functions),
and the language-model loss computed without the logits of the batch.

This module imports nothing but torch and transformers: `save_pretrained` copies it next to the weights with the
modeling code.
"""

import torch
from torch import nn
from transformers.utils import is_torch_distributed_available

from .configuration_aiayn import AiaynConfig
from .policy_aiayn import check_labels_shape

if is_torch_distributed_available():
    from torch.distributed.tensor import DTensor
else:
    DTensor = ()  # an empty tuple of classes: no tensor is an instance


def sequence_classification_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    config: AiaynConfig,
    num_items_in_batch: torch.Tensor | int | None = None,
    **kwargs,
) -> torch.Tensor:
    """Cross-entropy, mean squared error or binary cross-entropy, by `config.problem_type` (inferred from the labels
    as in transformers). With `num_items_in_batch` (the Trainer's count over all accumulated micro-batches), each
    loss is a sum divided by it, so that gradient accumulation reproduces the full batch's mean for every problem
    type, not only for single-label classification."""
    num_labels = config.num_labels
    check_labels_shape(labels, (len(logits),), "one label (or one row of labels) per example", exact=False)
    if config.problem_type is None:
        if num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    labels = labels.to(logits.device)
    reduction = "mean" if num_items_in_batch is None else "sum"
    if config.problem_type == "single_label_classification":
        loss = nn.functional.cross_entropy(logits.view(-1, num_labels).float(), labels.view(-1), reduction=reduction)
    elif config.problem_type == "regression":
        predictions = logits.squeeze(-1) if num_labels == 1 else logits
        loss = nn.functional.mse_loss(predictions.float(), labels.view_as(predictions).float(), reduction=reduction)
    elif config.problem_type == "multi_label_classification":
        loss = nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction=reduction)
    else:
        raise ValueError(f"Unknown problem_type {config.problem_type!r}.")
    if num_items_in_batch is not None:
        loss = loss / torch.as_tensor(num_items_in_batch, device=loss.device)
    return loss


def skips_logits(skip_logits: bool | None, labels: torch.Tensor | None, training: bool) -> bool:
    """Whether a language-model head computes its loss without the logits (`token_prediction_loss`). `skip_logits` is
    the argument transformers' Trainer and Liger-Kernel use: by default the logits are skipped when training with
    labels, where only the loss is needed; `skip_logits=False` asks for them."""
    if skip_logits and labels is None:
        raise ValueError("skip_logits=True computes the loss without logits, from the labels; no labels were given.")
    return training and labels is not None if skip_logits is None else skip_logits


class LinearCrossEntropy(torch.autograd.Function):
    """`sum_i -(1 - e) log p_i[y_i] - (e / V) sum_v log p_i[v]`, `p_i = softmax(x_i W^T + b)` over V tokens, over the
    rows with a label (`y_i != ignore_index`), and its gradients, computed a chunk of rows at a time (Liger-Kernel's
    fused linear cross-entropy): neither the logits nor their float32 copy, probabilities or gradient exist for more
    than one chunk. `e` is the label smoothing (section 5.4's epsilon_ls; 0: the plain cross-entropy), the loss
    `torch.nn.functional.cross_entropy` computes with `label_smoothing=e`. The gradients are computed in the forward,
    from each chunk's probabilities (`dL/dlogits = softmax - (1 - e) onehot(y) - e / V`), and handed over, scaled in
    place, by the backward, which therefore runs once (as after any backward without `retain_graph`)."""

    @staticmethod
    def forward(
        ctx, hidden, weight, bias, labels, ignore_index: int, label_smoothing: float, chunk_rows: int, recorded: bool
    ) -> torch.Tensor:
        """`recorded`: whether autograd records the call (`torch.is_grad_enabled()` outside it); if not, no
        gradient is computed."""
        needs_hidden, needs_weight, needs_bias = (recorded and needs for needs in ctx.needs_input_grad[:3])
        needs_bias = needs_bias and bias is not None
        grad_hidden = torch.empty_like(hidden) if needs_hidden else None
        grad_weight = grad_bias = None
        total = hidden.new_zeros((), dtype=torch.float32)
        for start in range(0, hidden.shape[0], chunk_rows):
            rows, targets = hidden[start : start + chunk_rows], labels[start : start + chunk_rows]
            logits = nn.functional.linear(rows, weight, bias)  # in autocast's dtype where it is on
            dtype = logits.dtype
            log_probabilities = torch.log_softmax(logits, -1, dtype=torch.float32)
            del logits  # from here one chunk-sized buffer lives: the probabilities, then their gradient
            labelled = (targets != ignore_index)[:, None]
            targets = targets[:, None].masked_fill(~labelled, 0)
            total -= (1 - label_smoothing) * (log_probabilities.gather(1, targets) * labelled).sum()
            spread = label_smoothing / log_probabilities.shape[1]
            if label_smoothing:
                total -= spread * (log_probabilities.sum(1, keepdim=True) * labelled).sum()
            # softmax - (1 - e) onehot(y) - e / V, for every row: the unlabelled rows' share is removed from the
            # (narrow) operands.
            probabilities = log_probabilities.exp_().sub_(spread) if label_smoothing else log_probabilities.exp_()
            probabilities.scatter_add_(1, targets, labelled.float() * (label_smoothing - 1))
            grad_logits, kept = probabilities.to(dtype), labelled.to(dtype)
            if needs_hidden:
                chunk_grad = (grad_logits @ weight.to(dtype)) * kept
                grad_hidden[start : start + chunk_rows] = chunk_grad
            if needs_weight:  # accumulated in float32 whatever the products' dtype
                chunk_grad = (grad_logits.t() @ (rows.to(dtype) * kept)).float()
                grad_weight = chunk_grad if grad_weight is None else grad_weight.add_(chunk_grad)
            if needs_bias:
                chunk_grad = (kept.t() @ grad_logits).float().squeeze(0)
                grad_bias = chunk_grad if grad_bias is None else grad_bias.add_(chunk_grad)
        # Kept as attributes, not saved tensors, so that the backward can hand them over without a copy.
        ctx.gradients = (grad_hidden, grad_weight, grad_bias)
        ctx.weight_dtype = weight.dtype
        return total

    @staticmethod
    def backward(ctx, grad_total: torch.Tensor):
        gradients, ctx.gradients = ctx.gradients, None
        if gradients is None:
            raise RuntimeError("The loss computed without logits can be backpropagated once (no retain_graph).")
        grad_hidden, grad_weight, grad_bias = (None if grad is None else grad.mul_(grad_total) for grad in gradients)
        if grad_weight is not None:
            grad_weight = grad_weight.to(ctx.weight_dtype)
        if grad_bias is not None:
            grad_bias = grad_bias.to(ctx.weight_dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None, None, None


def token_prediction_loss(
    hidden_states: torch.Tensor,
    labels: torch.Tensor,
    projection: nn.Linear,
    features: nn.Module | None = None,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    **kwargs,
) -> torch.Tensor:
    """The cross-entropy of the tokens `labels` names under `projection(features(hidden_states))`, the same value and
    gradients as transformers' loss over the logits (the mean over labelled tokens, or the sum divided by the
    Trainer's `num_items_in_batch`) without the logits of the batch: in eager mode only the labelled rows are read
    (a masked LM predicts about 15% of its tokens), and `LinearCrossEntropy` projects them a chunk at a time. With
    `label_smoothing`, the loss transformers' `LabelSmoother` (the `Trainer`'s `label_smoothing_factor`) computes from
    the logits (`logits_cross_entropy`)."""
    hidden_states = hidden_states.reshape(-1, hidden_states.shape[-1])
    labels = labels.reshape(-1).to(hidden_states.device)
    if not torch.compiler.is_compiling():  # a data-dependent shape would break the graph
        labelled = labels != ignore_index
        hidden_states, labels = hidden_states[labelled], labels[labelled]
    if features is not None:
        hidden_states = features(hidden_states)
    owned = projection._forward_hooks or projection._forward_pre_hooks or isinstance(projection.weight, DTensor)
    if isinstance(projection, nn.Linear) and not owned:
        # Chunks of at least 256 rows keep the products efficient; 2^24 logits (64 MiB in float32) bound each one.
        chunk_rows = max(256, 2**24 // projection.out_features)
        total = LinearCrossEntropy.apply(
            hidden_states,
            projection.weight,
            projection.bias,
            labels,
            ignore_index,
            label_smoothing,
            chunk_rows,
            torch.is_grad_enabled(),
        )
        return per_item(total, labels, num_items_in_batch, ignore_index)
    # An adapter, a hook (PEFT, accelerate's offloading) or tensor parallelism owns the projection: call it.
    return logits_cross_entropy(projection(hidden_states), labels, label_smoothing, num_items_in_batch, ignore_index)


def logits_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    label_smoothing: float,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    **kwargs,
) -> torch.Tensor:
    """The cross-entropy of `logits` (`(..., vocab_size)`) at the tokens `labels` names with label smoothing
    `label_smoothing` (section 5.4), in float32: the mean over labelled tokens, or the sum divided by the Trainer's
    `num_items_in_batch`, as transformers' `LabelSmoother` computes it. Other keyword arguments (a model's inputs
    besides the loss's) are ignored, as transformers' loss functions ignore them."""
    labels = labels.reshape(-1).to(logits.device)
    total = nn.functional.cross_entropy(
        logits.reshape(len(labels), -1).float(),
        labels,
        ignore_index=ignore_index,
        reduction="sum",
        label_smoothing=label_smoothing,
    )
    return per_item(total, labels, num_items_in_batch, ignore_index)


def per_item(
    total: torch.Tensor, labels: torch.Tensor, num_items_in_batch: torch.Tensor | int | None, ignore_index: int
) -> torch.Tensor:
    """A summed loss divided by the Trainer's `num_items_in_batch` (its count over every accumulated micro-batch),
    else by the labelled tokens of `labels`."""
    if num_items_in_batch is None:
        return total / (labels != ignore_index).sum()
    return total / torch.as_tensor(num_items_in_batch, device=total.device)
