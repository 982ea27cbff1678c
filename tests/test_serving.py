"""Serving many requests: transformers' continuous batching (paged attention) and `transformers serve` through
`aiayn serve`, a real server process answered over HTTP."""

import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import openai
import pytest
import torch
import transformers
from helpers import VOCAB, lm_model, word_tokenizer

PROMPT_LENGTHS = (3, 8, 12, 17)
# A paged cache sized for these prompts on a CPU, as the serving page sizes it: by default transformers sizes it from
# the free memory and spends seconds filling it.
PAGED_CACHE = transformers.ContinuousBatchingConfig(num_blocks=16, page_size=16, max_batch_tokens=64)


def prompts() -> list[list[int]]:
    generator = torch.Generator().manual_seed(11)
    return [torch.randint(3, VOCAB, (length,), generator=generator).tolist() for length in PROMPT_LENGTHS]


def greedy(max_new_tokens: int = 8) -> transformers.GenerationConfig:
    # No EOS, so that every request runs all its steps and the comparison covers them all.
    return transformers.GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=None)


@pytest.mark.parametrize(
    ("position", "attn_implementation"),
    [("learned", "sdpa"), ("sinusoidal", "sdpa"), ("rotary", "sdpa"), ("none", "sdpa"), ("learned", "eager")],
)
def test_continuous_batching_gives_generates_tokens(position, attn_implementation):
    """`generate_batch` packs the 4 prompts into one paged cache, prefills and decodes them together; each request's
    tokens are those `generate` gives it alone. Eager attention runs as transformers' `paged|eager`."""
    model = lm_model("decoder", attn_implementation, position_embedding_type=position, pad_token_id=0)
    outputs = model.generate_batch(
        inputs=prompts(), generation_config=greedy(), continuous_batching_config=PAGED_CACHE
    )
    batched = [outputs[request].generated_tokens for request in sorted(outputs)]
    alone = [model.generate(torch.tensor([p]), generation_config=greedy())[0, len(p) :].tolist() for p in prompts()]
    assert batched == alone and all(len(tokens) == 8 for tokens in batched)
    assert model.config._attn_implementation == attn_implementation  # restored after the batch


@pytest.mark.parametrize(
    ("family", "overrides", "problem"),
    [("decoder", {"position_embedding_type": "relative"}, "Relative position bias"), ("seq2seq", {}, "encoder")],
)
def test_continuous_batching_refuses_what_it_cannot_run(family, overrides, problem):
    model = lm_model(family, **overrides)
    with pytest.raises(ValueError, match=problem):
        model.generate_batch(inputs=prompts(), generation_config=greedy(), continuous_batching_config=PAGED_CACHE)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def decoder_folder(tmp_path_factory):
    """A decoder LM with a word tokenizer whose chat template joins the messages' contents, and the tokens `generate`
    continues its prompt "w5 w6 w7" with."""
    folder = tmp_path_factory.mktemp("served") / "decoder"
    model = lm_model("decoder", pad_token_id=0, bos_token_id=1, eos_token_id=2)
    tokenizer = word_tokenizer()
    tokenizer.chat_template = "{% for message in messages %}{{ message['content'] }} {% endfor %}"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    prompt = tokenizer("w5 w6 w7", return_tensors="pt")
    continuation = model.generate(**prompt, generation_config=greedy(5))[0, 3:]
    return str(folder), tokenizer.decode(continuation)


class ServerExited(Exception):
    """A server process ended before it answered; the message holds the end of its output."""


def started_server(command: list[str]) -> tuple[subprocess.Popen, str]:
    """A server process started by `command` (which it is given a free port to listen on), once it answers
    /health."""
    port = free_port()
    environment = {**os.environ, "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        [*command, "--port", str(port), "--device", "cpu"],
        env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 180
    while True:
        if process.poll() is not None:
            raise ServerExited(f"the server exited with {process.returncode}:\n{process.stdout.read()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return process, url
        except (urllib.error.URLError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            end(process)
            pytest.fail("the server did not answer /health within 180 s")
        time.sleep(0.5)


def end(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(scope="module")
def server(decoder_folder):
    """`aiayn serve FOLDER`: transformers' server process, ended by its process id."""
    process, url = started_server([sys.executable, "-m", "aiayn.cli", "serve", decoder_folder[0]])
    yield url
    end(process)


def test_a_served_decoder_answers_chat_and_completion_requests(server, decoder_folder):
    """An OpenAI client against the server: a chat completion, the same streamed, and a text completion, all with
    the greedy continuation `generate` gives (the chat template turns the message into the same prompt)."""
    folder, expected = decoder_folder
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused")
    messages = [{"role": "user", "content": "w5 w6 w7"}]
    chat = client.chat.completions.create(model=folder, messages=messages, max_tokens=5, temperature=0)
    assert chat.choices[0].message.content == expected and chat.usage.completion_tokens == 5
    stream = client.chat.completions.create(
        model=folder, messages=messages, max_tokens=5, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)  # the server may send several tokens in one chunk: the usage chunk counts them
    pieces = [chunk.choices[0].delta.content for chunk in chunks if chunk.choices and chunk.choices[0].delta.content]
    assert "".join(pieces) == expected and chunks[-1].usage.completion_tokens == 5
    completion = client.completions.create(model=folder, prompt="w5 w6 w7", max_tokens=5, temperature=0)
    assert completion.choices[0].text == expected


def test_a_served_decoder_batches_concurrent_requests_continuously(decoder_folder):
    """`aiayn serve FOLDER --continuous-batching` (with a paged cache sized for a CPU): four completion requests sent
    at once each get the greedy continuation `generate` gives their prompt alone, and the server ran each under
    continuous batching."""
    folder, _ = decoder_folder
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    texts = ["w5 w6 w7", "w9 w10", "w11 w12 w13 w14 w15 w16", "w40"]
    expected = []
    for text in texts:
        prompt = tokenizer(text, return_tensors="pt")
        continuation = model.generate(**prompt, generation_config=greedy(5))[0, prompt["input_ids"].shape[1] :]
        expected.append(tokenizer.decode(continuation))
    assert len(set(expected)) == len(texts)  # each answer tells which prompt it continues
    paged_cache = ["--cb-num-blocks", "16", "--cb-block-size", "16", "--cb-max-batch-tokens", "64"]
    command = [sys.executable, "-m", "aiayn.cli", "serve", folder, "--continuous-batching", *paged_cache,
               "--enable-log-requests"]  # fmt: skip
    process, url = started_server(command)
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")

        def complete(text: str) -> str:
            return client.completions.create(model=folder, prompt=text, max_tokens=5, temperature=0).choices[0].text

        with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:
            answers = list(pool.map(complete, texts))
    finally:
        end(process)
    assert answers == expected
    requests = [line for line in process.stdout.read().splitlines() if f"model {folder}, " in line]
    assert len(requests) == len(texts) and all("continuous batching" in line for line in requests)


def test_transformers_serve_serves_a_gpt2_folder(tmp_path):
    """What `transformers serve` does serve: a folder of a class it has (a GPT-2 built from a tiny config), which
    answers a completion request with the greedy continuation `generate` gives."""
    folder = str(tmp_path / "gpt2")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2,
        pad_token_id=0, initializer_range=0.2,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    tokenizer = word_tokenizer()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    prompt = tokenizer("w5 w6 w7", return_tensors="pt")
    expected = tokenizer.decode(model.generate(**prompt, generation_config=greedy(5))[0, 3:])
    process, url = started_server([sys.executable, "-m", "transformers.cli.transformers", "serve", folder])
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        completion = client.completions.create(model=folder, prompt="w5 w6 w7", max_tokens=5, temperature=0)
    finally:
        end(process)
    assert completion.choices[0].text == expected and completion.usage.completion_tokens == 5


@pytest.mark.xfail(
    strict=True,
    raises=ServerExited,
    reason="transformers serve 5.24 loads the class its config's architectures names from the transformers module "
    "(getattr(transformers, config.architectures[0])), where no custom-code class is, so it fails with "
    "AttributeError; this test passes (and so fails as strict xfail) once it resolves custom classes, and "
    "`aiayn serve` is then no longer needed.",
)
def test_transformers_serve_alone_serves_a_decoder_folder(decoder_folder):
    folder, expected = decoder_folder
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", folder, "--trust-remote-code"]
    try:
        process, url = started_server(command)
    except ServerExited as exited:
        assert "has no attribute AiaynDecoderForCausalLM" in str(exited)  # the known reason, not another
        raise
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        completion = client.completions.create(model=folder, prompt="w5 w6 w7", max_tokens=5, temperature=0)
        assert completion.choices[0].text == expected
    finally:
        end(process)


@pytest.mark.parametrize("family", ["encoder", "decoder", "seq2seq"])
def test_an_attention_backend_a_user_registers_runs_every_attention(family):
    """A backend registered with transformers' `AttentionInterface` and `AttentionMaskInterface` (here sdpa's function
    and mask, counted) computes every self- and cross-attention, and the model's outputs are sdpa's."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    calls = []

    def counted_sdpa(module, *args, **kwargs):
        calls.append(type(module).__name__)
        return sdpa_attention_forward(module, *args, **kwargs)

    AttentionInterface.register("counted_sdpa", counted_sdpa)
    AttentionMaskInterface.register("counted_sdpa", sdpa_mask)
    ids = torch.randint(3, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # padding, so that the masks matter
    inputs = {"input_ids": ids, "attention_mask": mask}
    if family == "seq2seq":
        inputs.update(decoder_input_ids=ids, decoder_attention_mask=mask)
    with torch.no_grad():
        expected = lm_model(family, "sdpa")(**inputs).logits
        logits = lm_model(family, "counted_sdpa")(**inputs).logits
    layers = {"encoder": 2, "decoder": 2, "seq2seq": 2 + 3}[family]
    assert len(calls) == layers + (3 if family == "seq2seq" else 0)  # the seq2seq decoder's 3 cross-attentions
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)
