"""``mmspec image --model DIR --prompt TEXT``: text-to-image with a Janus checkpoint (a tiny random stock
``JanusForConditionalGeneration`` saved with a real ``JanusProcessor`` and chat template) through the command
line gives the codes of ``mmspec.pipeline(DIR)`` for the same prompts, greedy and seeded, and the stock Janus
generate's codes where decoding is lossless; options of the other kind of model are one clear error."""

import json
import os

import pytest
import torch

import mmspec
from mmspec.cli import main
from mmspec.tiny import JANUS_BOI, tiny_janus, tiny_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PROMPTS = ["a red circle", "a blue square on grass"]  # different token lengths: the batch is left-padded
CHAT = ("{% for m in messages %}<|User|>: {% for c in m['content'] %}{{ c['text'] }}{% endfor %}\n{% endfor %}"
        "{% if add_generation_prompt %}<|Assistant|>:{% endif %}")


def tiny_janus_processor():
    """A ``JanusProcessor`` over a character-level tokenizer that fits the tiny Janus's 128 text ids (its special
    tokens at the ids :mod:`mmspec.tiny` gives them: pad 0, BOS 1, EOS 2, <begin_of_image> 3, image 4)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import JanusImageProcessor, JanusProcessor, PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<begin_of_image>", "<image_placeholder>", "<end_of_image>"]
    chars = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:!?|<>_-'\n")
    vocab = {t: i for i, t in enumerate(specials + chars)}
    assert vocab["<begin_of_image>"] == JANUS_BOI and len(vocab) <= 128
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                  extra_special_tokens={"image_token": "<image_placeholder>",
                                                        "boi_token": "<begin_of_image>", "eoi_token": "<end_of_image>"})
    images = JanusImageProcessor(size={"height": 16, "width": 16})
    return JanusProcessor(image_processor=images, tokenizer=tok, chat_template=CHAT, num_image_tokens=16)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("janus_ckpt")
    tiny_janus(seed=0).save_pretrained(root / "target")  # generation_kwargs (<begin_of_image>) lost on loading:
    tiny_janus_processor().save_pretrained(root / "target")  # the pipeline takes it from the processor
    tiny_janus(seed=1, num_layers=1).save_pretrained(root / "draft")  # weights only: no processor needed
    return root


def _run(ckpt, out, *extra):
    argv = ["image", "--model", str(ckpt / "target"), "--cfg-scale", "4", "--out", str(out)]
    for p in PROMPTS:
        argv += ["--prompt", p]
    return main(argv + list(extra))


def _codes(out):
    return torch.tensor(json.loads((out / "codes.json").read_text())["codes"])


def test_janus_cli_greedy_spec_equals_pipeline_and_stock_generate(ckpt, tmp_path):
    out = tmp_path / "spec"
    assert _run(ckpt, out, "--drafter", str(ckpt / "draft"), "--method", "spec", "--temperature", "0",
                "--batch", "2") == 0
    for name in ("grid.png", "stats.json", "codes.json", "picture_000.png", "picture_001.png"):
        assert (out / name).exists(), name
    stats = json.loads((out / "stats.json").read_text())
    assert stats["method"] == "spec" and stats["do_sample"] is False and stats["cfg_scale"] == 4.0
    assert stats["prompts"] == PROMPTS and stats["images"] == 2 and stats["tau"] >= 1.0
    codes = _codes(out)
    assert codes.shape == (2, 16)
    pipe = mmspec.pipeline(str(ckpt / "target"), drafter=str(ckpt / "draft"), method="spec", cfg_scale=4.0)
    assert torch.equal(pipe.generate(prompts=PROMPTS, decode=False).codes, codes)  # same prompts in Python
    ids, mask = pipe.encode(PROMPTS)
    assert (ids[:, -1] == JANUS_BOI).all() and not bool(mask.all())  # chat template, left-padded, <begin_of_image>
    for i, prompt in enumerate(PROMPTS):  # lossless: the stock Janus generate's codes, prompt by prompt
        assert torch.equal(pipe.generate(prompts=[prompt], method="ar", decode=False).codes[0], codes[i])


def test_janus_cli_seeded_lantern_pp_equals_pipeline(ckpt, tmp_path):
    out = tmp_path / "lpp"
    assert _run(ckpt, out, "--drafter", str(ckpt / "draft"), "--lam", "3", "--lantern-k", "4", "--seed", "3",
                "--batch", "1", "--measure-tv") == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["method"] == "lantern++" and stats["do_sample"] is True and stats["lam"] == 3.0
    assert stats["max_output_tv"] is not None and stats["max_moved_mass"] <= 1.0
    pipe = mmspec.pipeline(str(ckpt / "target"), drafter=str(ckpt / "draft"), method="lantern++", cfg_scale=4.0,
                           lam=3.0, lantern_k=4, do_sample=True)
    ref = torch.cat([pipe.generate(prompts=[p], seed=3 + i, decode=False).codes for i, p in enumerate(PROMPTS)])
    assert torch.equal(_codes(out), ref)  # batch i draws with seed + i, as for the zoo model


def test_janus_cli_without_drafter_runs_the_stock_generate(ckpt, tmp_path):
    out, listing = tmp_path / "ar", tmp_path / "prompts.txt"
    listing.write_text("a green square\n\n")  # --prompts-file: one prompt a line, after the --prompt ones
    assert _run(ckpt, out, "--prompts-file", str(listing), "--temperature", "0", "--batch", "1") == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["method"] == "ar" and "drafter_path" not in stats and (out / "grid.png").exists()
    assert stats["prompts"] == PROMPTS + ["a green square"] and len(_codes(out)) == 3
    pipe = mmspec.pipeline(str(ckpt / "target"), method="ar", cfg_scale=4.0)
    assert torch.equal(_codes(out)[2:], pipe.generate(prompts=["a green square"], decode=False).codes)


def test_options_of_the_other_kind_are_refused(ckpt, tmp_path, capsys):
    def error(argv):
        assert main(argv) == 2
        return capsys.readouterr().err

    target, out = str(ckpt / "target"), str(tmp_path / "x")
    assert "--classes applies to the zoo's class-conditional model" in error(
        ["image", "--model", target, "--prompt", "a", "--classes", "0", "--out", out])
    assert "--prompt applies to a Janus" in error(["image", "--prompt", "a red circle", "--out", out])
    assert "--no-chat-template applies to a Janus" in error(["image", "--no-chat-template", "--out", out])
    assert "give --prompt" in error(["image", "--model", target, "--out", out])
    assert "smaller Janus checkpoint" in error(["image", "--model", target, "--prompt", "a", "--drafter", "sar",
                                                "--out", out])
    assert "needs --drafter" in error(["image", "--model", target, "--prompt", "a", "--method", "spec", "--out", out])
    assert "same token length" in error(["image", "--model", target, "--prompt", "a", "--prompt", "a b c",
                                         "--out", out])
    draft = str(ckpt / "draft")
    assert "does not apply to method 'spec'" in error(["image", "--model", target, "--prompt", "a", "--drafter",
                                                      draft, "--method", "spec", "--lam", "2", "--out", out])
    tiny_model("llama", seed=0).save_pretrained(tmp_path / "llama")
    assert "mmspec image runs Janus" in error(["image", "--model", str(tmp_path / "llama"), "--out", out])
    assert "neither" in error(["image", "--model", str(tmp_path / "nothing"), "--out", out])
    err = error(["image", "--model", target, "--prompt", "a", "--classes", "0", "--out", out])
    assert err.startswith("mmspec: error:") and len(err.strip().splitlines()) == 1
