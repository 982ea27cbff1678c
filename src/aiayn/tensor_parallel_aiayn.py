"""Tensor parallelism of the fused attention projections, as a parallel style of transformers.

`qkv_proj` stacks the query, key and value projections (`kv_proj` the key and value ones), each block heads-major.
Split column-wise as one matrix, rank 0 would hold all the queries and half the keys; `aiayn_qkv_colwise` and
`aiayn_kv_colwise` give each rank the same slice of every block, weight and bias alike, so that it computes whole
heads of q, k and v. (transformers' `packed_colwise` splits the weight so, but its bias contiguously.) The plan that
names them is `configuration_aiayn.AiaynConfig.base_model_tp_plan`.

This module imports nothing but torch and transformers: `save_pretrained` copies it next to the weights with the
modeling code, so that a saved folder shards with `trust_remote_code=True` too.
"""

from torch import nn
from transformers.utils import is_torch_distributed_available


def register_parallel_styles() -> None:
    """Registers `aiayn_qkv_colwise` and `aiayn_kv_colwise` with transformers' parallel styles, where torch has
    distributed support."""
    if not is_torch_distributed_available():
        return
    from torch.distributed.tensor import distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard
    from transformers.distributed.parallel_utils import ALL_PARALLEL_STYLES
    from transformers.distributed.tensor_parallel import PackedColwiseParallel

    class FusedBlocksColwiseParallel(PackedColwiseParallel):
        """Column-wise split of a projection of `split_factor` stacked blocks: rank r of n holds the r-th n-th of
        every block, in the weight's output rows and in the bias."""

        def shard_param(self, module: nn.Module, param: str, mesh, **kwargs):
            meta = module._parameters.get(param)
            if meta is None:
                return
            placement = _StridedShard(dim=0, split_factor=self.split_factor)  # (out, in) weights and (out,) biases
            module._parameters[param] = nn.Parameter(
                distribute_tensor(meta, mesh, [placement], src_data_rank=None), requires_grad=meta.requires_grad
            )

    ALL_PARALLEL_STYLES.register("aiayn_qkv_colwise", FusedBlocksColwiseParallel(split_factor=3))
    ALL_PARALLEL_STYLES.register("aiayn_kv_colwise", FusedBlocksColwiseParallel(split_factor=2))
