"""The experiments around the model: `aiayn demo` (`demo`), the paper's Table 3 and the comparison with transformers'
Marian (`ablation`) and the figures of a run (`plots`, the `plot` extra); the context-free baselines the demo's
metrics stand beside are `aiayn.baselines`."""
