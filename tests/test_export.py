"""The standard PyTorch paths for every family: `torch.compile` with its default backend (inductor) for inference,
training and `generate`, `torch.export`, ONNX run in onnxruntime, and transformers' ExecuTorch export wrappers."""

import onnx
import onnxruntime
import pytest
import torch
from helpers import FAMILIES, POSITION_TYPES, lm_inputs, lm_model, one_layer, padded_batch, prompt_batch, random_ids
from torch.export import Dim
from torch.utils._pytree import tree_leaves
from transformers import CompileConfig
from transformers.integrations.executorch import Seq2SeqLMExportableModule, TorchExportableModuleForDecoderOnlyLM

# Every model here has one layer a stack (`one_layer`). Inductor compiles take seconds each, so each compiled path runs
# on a few pairs; together the pairs of the compiled forwards cover every family and every position type.
COMPILED_FORWARDS = [
    ("encoder", "sinusoidal"),
    ("encoder", "none"),
    ("decoder", "learned"),
    ("decoder", "rotary"),
    ("seq2seq", "relative"),
]
# (family, positions, label smoothing): the smoothed loss is computed in the same fused function
COMPILED_TRAINING_STEPS = [("encoder", "relative", 0.0), ("decoder", "sinusoidal", 0.0), ("seq2seq", "rotary", 0.0),
                           ("decoder", "sinusoidal", 0.1)]  # fmt: skip
COMPILED_GENERATIONS = [("decoder", "rotary"), ("seq2seq", "relative")]
DYNAMIC_EXPORTS = [("encoder", "relative"), ("decoder", "rotary"), ("seq2seq", "learned")]
# ONNX translates the exported program operator by operator (seconds per program): every family twice, together
# every position type; `torch.export` itself is tested on every pair.
ONNX_EXPORTS = [
    ("encoder", "learned"),
    ("encoder", "relative"),
    ("decoder", "sinusoidal"),
    ("decoder", "rotary"),
    ("seq2seq", "none"),
    ("seq2seq", "relative"),
]
# The ExecuTorch wrappers trace with dynamo (seconds per program): the position types whose positions come from the
# cache's length (absolute embeddings, a relative bias, rotations) for the decoder, T5's for seq2seq.
EXECUTORCH_DECODER_POSITIONS = ("learned", "relative", "rotary")
EXECUTORCH_SEQ2SEQ_POSITIONS = ("relative",)
NEW_TOKENS = 8


def unique_graphs() -> int:
    """How many graphs dynamo has compiled since its counters were last cleared."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def export_inputs(family: str, ids: torch.Tensor, mask: torch.Tensor) -> dict:
    """Forward arguments for export: without a cache, whose object would otherwise be one of the outputs."""
    inputs = lm_inputs(family, ids, mask)
    if family != "encoder":
        inputs["use_cache"] = False
    return inputs


def operator_names(program: torch.export.ExportedProgram) -> set[str]:
    """The names of the operators an exported program calls, such as `aten.linear.default`, its nested graphs (the
    bodies of higher-order operators such as `wrap_with_set_grad_enabled`) included."""
    graphs = [module.graph for module in program.graph_module.modules() if isinstance(module, torch.fx.GraphModule)]
    return {str(node.target) for graph in graphs for node in graph.nodes if node.op == "call_function"}


def mkldnn_operators(program: torch.export.ExportedProgram) -> list[str]:
    """The oneDNN-specific operators of an exported program: only CPU builds of torch with oneDNN run them, and
    neither ONNX nor ExecuTorch can translate them."""
    return sorted(name for name in operator_names(program) if "mkldnn" in name)


@pytest.mark.parametrize(("family", "position"), COMPILED_FORWARDS)
def test_inductor_compiled_forward_matches_eager_without_and_with_padding(family, position):
    """A batch without padding, then two padded ones: one graph serves them all (no recompile on new mask values)."""
    model = lm_model(family, **one_layer(family), position_embedding_type=position)
    ids, mask = padded_batch()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(model, fullgraph=True)
    for attention_mask in (torch.ones_like(mask), mask, mask.roll(1, dims=0)):
        inputs = lm_inputs(family, ids, attention_mask)
        with torch.no_grad():
            expected = model(**inputs).logits
            got = compiled(**inputs).logits
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    assert unique_graphs() == 1


@pytest.mark.parametrize(("family", "position", "label_smoothing"), COMPILED_TRAINING_STEPS)
def test_inductor_compiled_training_step_gives_eagers_loss_and_gradients(family, position, label_smoothing):
    ids, mask = padded_batch()
    inputs = lm_inputs(family, ids, mask)
    inputs["labels"] = ids.masked_fill(mask == 0, -100)
    model = lm_model(
        family, **one_layer(family), position_embedding_type=position, label_smoothing=label_smoothing
    ).train()
    torch._dynamo.reset()
    results = {}
    for name, run in (("eager", model), ("compiled", torch.compile(model, fullgraph=True))):
        model.zero_grad(set_to_none=True)
        loss = run(**inputs).loss
        loss.backward()
        results[name] = {key: parameter.grad for key, parameter in model.named_parameters()}
        results[name]["loss"] = loss.detach()
    assert all(gradient is not None for gradient in results["compiled"].values())
    torch.testing.assert_close(results["compiled"], results["eager"], rtol=0, atol=1e-6)


@pytest.mark.parametrize(("family", "position"), COMPILED_GENERATIONS)
def test_inductor_compiled_static_cache_generation_gives_eagers_tokens_and_logits(family, position):
    """generate() compiles the decoding step once (`fullgraph=True`) and reuses it for every new token."""
    model = lm_model(family, **one_layer(family), position_embedding_type=position, tie_word_embeddings=False)
    ids, mask = prompt_batch(family)
    settings = {
        "attention_mask": mask,
        "cache_implementation": "static",
        "max_new_tokens": NEW_TOKENS,
        "min_new_tokens": NEW_TOKENS,
        "do_sample": False,
        "return_dict_in_generate": True,
        "output_logits": True,
    }
    expected = model.generate(ids, **settings)
    compile_config = CompileConfig(fullgraph=True, dynamic=False)
    compile_config._compile_all_devices = True  # generate() compiles automatically on accelerators only
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = model.generate(ids, compile_config=compile_config, **settings)
    assert torch.equal(compiled.sequences, expected.sequences)
    torch.testing.assert_close(compiled.logits, expected.logits, rtol=0, atol=1e-5)
    assert unique_graphs() == 1


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("position", POSITION_TYPES)
def test_exported_program_has_no_mkldnn_operators_and_gives_eagers_outputs(family, position):
    """The program holds standard operators only, and computes eager's outputs bit for bit."""
    model = lm_model(family, **one_layer(family), position_embedding_type=position)
    inputs = export_inputs(family, *padded_batch())
    program = torch.export.export(model, (), kwargs=inputs)
    assert mkldnn_operators(program) == []
    with torch.no_grad():
        expected = model(**inputs)
        got = program.module()(**inputs)
    assert got.keys() == expected.keys()
    torch.testing.assert_close(tree_leaves(got), tree_leaves(expected), rtol=0, atol=0)


@pytest.mark.parametrize(("family", "position"), DYNAMIC_EXPORTS)
def test_export_with_dynamic_batch_size_and_length_serves_other_shapes(family, position):
    """Traced at 3 x 9 tokens with both dimensions dynamic: eager's outputs bit for bit there and at 4 x 6."""
    model = lm_model(family, **one_layer(family), position_embedding_type=position)
    inputs = export_inputs(family, *padded_batch())
    batch, length = Dim("batch", min=1, max=8), Dim("length", min=2, max=32)
    shapes = {
        name: {0: batch, 1: length} if isinstance(value, torch.Tensor) else None for name, value in inputs.items()
    }
    program = torch.export.export(model, (), kwargs=inputs, dynamic_shapes=shapes)
    assert mkldnn_operators(program) == []
    for other in (inputs, export_inputs(family, *padded_batch(batch=4, length=6, seed=3))):
        with torch.no_grad():
            expected = tree_leaves(model(**other))
            torch.testing.assert_close(tree_leaves(program.module()(**other)), expected, rtol=0, atol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_core_aten_decomposition_has_no_mkldnn_operators_and_gives_eagers_outputs(family):
    """The exported program lowered to the core ATen operator set, as backends such as ExecuTorch take it."""
    model = lm_model(family, **one_layer(family), position_embedding_type="relative")
    inputs = export_inputs(family, *padded_batch())
    program = torch.export.export(model, (), kwargs=inputs).run_decompositions()
    assert mkldnn_operators(program) == []
    with torch.no_grad():
        expected = tree_leaves(model(**inputs))
        torch.testing.assert_close(tree_leaves(program.module()(**inputs)), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize(("family", "position"), ONNX_EXPORTS)
def test_onnx_export_runs_in_onnxruntime_with_pytorchs_outputs(family, position):
    """`torch.onnx.export(dynamo=True)`: a valid ONNX model whose inputs are the forward arguments and whose outputs,
    computed by onnxruntime on CPU, are PyTorch's."""
    model = lm_model(family, **one_layer(family), position_embedding_type=position)
    inputs = export_inputs(family, *padded_batch())
    program = torch.onnx.export(model, (), kwargs=inputs, dynamo=True, verbose=False)
    onnx.checker.check_model(program.model_proto, full_check=True)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        program.model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feed = {node.name: inputs[node.name].numpy() for node in session.get_inputs()}
    assert sorted(feed) == sorted(name for name, value in inputs.items() if isinstance(value, torch.Tensor))
    got = [torch.from_numpy(output) for output in session.run(None, feed)]
    with torch.no_grad():
        expected = tree_leaves(model(**inputs))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("position", EXECUTORCH_DECODER_POSITIONS)
def test_executorch_decoder_export_prefills_and_decodes_eagers_greedy_tokens(position):
    """`TorchExportableModuleForDecoderOnlyLM` with a static cache, exported with a dynamic number of tokens per call
    and driven as ExecuTorch's runner drives it: the prompt in one call, then one token per call, each at its
    position in the cache."""
    model = lm_model("decoder", **one_layer("decoder"), position_embedding_type=position, tie_word_embeddings=False)
    prompt = random_ids(1, 5, seed=5)
    expected = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
    with torch.no_grad():
        expected_logits = model(expected).logits[:, :-1]
    model.generation_config.cache_implementation = "static"
    exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=16)
    tokens = Dim("tokens", min=1, max=16)
    program = exportable.export(
        input_ids=prompt,
        cache_position=torch.arange(prompt.shape[1]),
        dynamic_shapes={"input_ids": {1: tokens}, "cache_position": {0: tokens}},
    )
    assert mkldnn_operators(program) == []
    step = program.module()
    logits = [step(input_ids=prompt, cache_position=torch.arange(prompt.shape[1]))]
    generated = prompt
    while generated.shape[1] < expected.shape[1]:
        next_token = logits[-1][:, -1:].argmax(-1)
        generated = torch.cat((generated, next_token), dim=1)
        if generated.shape[1] < expected.shape[1]:
            logits.append(step(input_ids=next_token, cache_position=torch.tensor([generated.shape[1] - 1])))
    assert torch.equal(generated, expected)
    torch.testing.assert_close(torch.cat(logits, dim=1), expected_logits, rtol=0, atol=1e-6)


@pytest.mark.parametrize("position", EXECUTORCH_SEQ2SEQ_POSITIONS)
def test_executorch_seq2seq_export_generates_eagers_greedy_tokens(position):
    """`Seq2SeqLMExportableModule` exports the encoder (dynamic source length, traced at 10 tokens) and the decoder
    step with a static cache; its `generate` gives eager greedy decoding's tokens for a 7-token source, and the
    exported decoder gives eager's logits along them."""
    model = lm_model("seq2seq", **one_layer("seq2seq"), position_embedding_type=position, tie_word_embeddings=False)
    source = random_ids(1, 7, seed=5)
    expected = model.generate(source, max_new_tokens=NEW_TOKENS, do_sample=False)
    with torch.no_grad():
        expected_states = model.get_encoder()(input_ids=source).last_hidden_state
        expected_logits = model(source, decoder_input_ids=expected).logits
    exportable = Seq2SeqLMExportableModule(
        model, batch_size=1, max_hidden_seq_length=32, cache_implementation="static", max_cache_length=16
    )
    exportable.export()
    assert mkldnn_operators(exportable.exported_encoder) == mkldnn_operators(exportable.exported_decoder) == []
    assert exportable.generate(source, max_new_tokens=NEW_TOKENS + 1) == expected[0].tolist()
    states = exportable.exported_encoder.module()(source)
    torch.testing.assert_close(states, expected_states, rtol=0, atol=1e-6)
    step = exportable.exported_decoder.module()
    logits = [step(expected[:, t : t + 1], states, torch.tensor([t])) for t in range(expected.shape[1])]
    torch.testing.assert_close(torch.cat(logits, dim=1), expected_logits, rtol=0, atol=1e-6)
