"""streamer=: HF's own streamers receive exactly what a speculative call generates, step by step, on the text
and VLM faces; batch > 1 and objects without the protocol are refused before any work."""

import threading

import pytest
import torch
from transformers import TextIteratorStreamer

import mmspec
from mmspec import VLMGenerator
from mmspec.drafters import PromptLookupDrafter
from mmspec.generator import SpeculativeGenerator
from mmspec.zoo import load
from mmspec.zoo import vlm_data as vd

PROMPT = "def add(a, b):\n"


class Recorder:
    """A bare streamer: keeps every put, counts end()."""

    def __init__(self):
        self.puts, self.ends = [], 0

    def put(self, value):
        self.puts.append(value.clone())

    def end(self):
        self.ends += 1


@pytest.fixture(scope="module")
def code():
    return load("code-target")


def _stream_text(pipe, **kw):
    """Run the call in a thread, as a chat UI does, and collect the text the iterator yields."""
    streamer = TextIteratorStreamer(pipe.tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=120)
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("out", pipe(PROMPT, streamer=streamer, **kw)))
    worker.start()
    pieces = list(streamer)
    worker.join()
    return "".join(pieces), result["out"]


@pytest.mark.parametrize("method", ["chain", "prompt-lookup", "plain"])
def test_text_iterator_streamer_gets_exactly_the_generated_text(code, method):
    pipe = mmspec.pipeline("zoo:code-target", method=method)
    text, out = _stream_text(pipe, max_new_tokens=40)
    assert text == out.texts[0] and len(text) > 10
    if method != "plain":
        assert out.stats.mean_accepted_tokens > 1.0  # several tokens per put: drafts were accepted


def test_puts_follow_hf_layout_and_the_committed_steps(code):
    """The prompt first as [1, P], then one [1, n] per step with n = the step's accepted length, then one end()."""
    pipe = mmspec.pipeline("zoo:code-target", method="chain")
    rec = Recorder()
    out = pipe(PROMPT, max_new_tokens=33, streamer=rec, stop_at_eos=False)
    prompt_len = out.sequences.shape[1] - 33
    assert rec.ends == 1
    assert torch.equal(rec.puts[0], out.sequences[:, :prompt_len])
    steps = rec.puts[1:]
    assert all(p.dim() == 2 and p.shape[0] == 1 for p in steps)
    assert [p.shape[1] for p in steps] == out.stats.accept_lengths[0]
    assert torch.equal(torch.cat(steps, 1), out.sequences[:, prompt_len:])


def test_stream_stops_at_eos_like_the_sequence(code):
    """A run cut at EOS mid-step: the streamed ids end with the EOS the sequence ends with."""
    ids = code.tokenizer(PROMPT, return_tensors="pt", add_special_tokens=False).input_ids
    gen = SpeculativeGenerator(code.model, PromptLookupDrafter(num_tokens=4))
    free = gen.generate(ids, max_new_tokens=40, eos_token_id=[]).sequences[0, ids.shape[1]:]
    eos = int(free[20])  # a token the run emits: taken as EOS, the run stops at its first occurrence
    rec = Recorder()
    out = gen.generate(ids, max_new_tokens=40, eos_token_id=eos, streamer=rec)
    streamed = torch.cat(rec.puts[1:], 1)[0]
    assert torch.equal(streamed, out.sequences[0, ids.shape[1]:]) and int(streamed[-1]) == eos
    assert len(streamed) <= 21 and rec.ends == 1


def test_engine_streams_and_ends_even_when_the_call_fails(code):
    gen = SpeculativeGenerator(code.model, PromptLookupDrafter(num_tokens=4))
    ids = code.tokenizer(PROMPT, return_tensors="pt", add_special_tokens=False).input_ids
    rec = Recorder()
    with pytest.raises(ValueError):
        gen.generate(ids, max_new_tokens=10_000, streamer=rec)  # longer than the model's positions
    assert rec.ends == 1


def test_streamer_refusals(code):
    pipe = mmspec.pipeline("zoo:code-target", method="chain")
    with pytest.raises(ValueError, match="batch size must be 1, got 2"):
        pipe([PROMPT, "x = 1\n"], streamer=Recorder())
    with pytest.raises(ValueError, match="put"):
        pipe(PROMPT, streamer=object())
    with pytest.raises(ValueError, match="batch size must be 1"):
        mmspec.pipeline("zoo:code-target", method="plain")([PROMPT, "y"], streamer=Recorder())


@pytest.mark.parametrize("method", ["msd", "plain"])
def test_vlm_streams_the_answer(method):
    entry = load("vlm-target")
    gen = VLMGenerator.from_pretrained("zoo:vlm-target", "zoo:vlm-msd", method=method)
    scene = vd.scenes("test", 1)[0]
    streamer = TextIteratorStreamer(entry.tokenizer.tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=120)
    result = {}
    prompt = [vd.with_image(vd.CAPTION_PROMPT)]
    worker = threading.Thread(target=lambda: result.setdefault("out", gen.generate(
        images=[scene.image()], prompts=prompt, max_new_tokens=32, streamer=streamer)))
    worker.start()
    text = "".join(streamer)
    worker.join()
    assert text.strip() == result["out"].texts[0] and text.strip()
    with pytest.raises(ValueError, match="batch size must be 1"):
        gen.generate(images=[scene.image()] * 2, prompts=prompt * 2, streamer=Recorder())


@pytest.mark.parametrize("method", ["ar", "lantern++"])
def test_image_pipeline_streams_the_code_tokens(method):
    pipe = mmspec.pipeline("zoo:image-target", method=method)
    rec = Recorder()
    out = pipe.generate([3], seed=0, streamer=rec)
    layout = pipe.generator.layout
    assert rec.ends == 1 and rec.puts[0].shape == (1, 1)  # the class token: the prompt
    streamed = torch.cat(rec.puts[1:], 1)
    assert torch.equal(layout.tokens_to_codes(streamed), out.codes)
    if out.stats is not None:
        assert [p.shape[1] for p in rec.puts[1:]] == out.stats.accept_lengths[0]
    with pytest.raises(ValueError, match="batch size must be 1"):
        pipe.generate([0, 1], streamer=Recorder())


def test_janus_streams_drafted_codes_and_refuses_the_stock_generate():
    from mmspec.janus import JanusImageGenerator
    from mmspec.tiny import JANUS_BOI, JANUS_BOS, tiny_janus

    gen = JanusImageGenerator(tiny_janus(0), tiny_janus(1, num_layers=1), method="spec")
    prompt = torch.tensor([[JANUS_BOS, 5, 6, 7, JANUS_BOI]])
    rec = Recorder()
    out = gen.generate(prompt, decode=False, streamer=rec)
    assert torch.equal(torch.cat(rec.puts[1:], 1) - gen.target.text_vocab, out.codes) and rec.ends == 1
    with pytest.raises(ValueError, match="takes no streamer"):
        gen.generate(prompt, method="ar", decode=False, streamer=Recorder())
