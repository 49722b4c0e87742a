"""``mmspec train msd|flash`` against a Qwen2-VL checkpoint (M-RoPE target: every processor output reaches the
target's training forward), then the saved drafter decodes exactly through ``VLMGenerator.from_pretrained``."""


import pytest
import torch

import mmspec
from mmspec import VLMGenerator
from tests.vlm_families import pictures, qwen_processor, tiny_qwen_vl, write_picture_rows

PROMPT = "Look: <|vision_start|><|image_pad|><|vision_end|> what is it?"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    home = tmp_path_factory.mktemp("qwen")
    proc, vocab, ids = qwen_processor()
    tiny_qwen_vl("2", vocab_size=vocab, ids=ids).save_pretrained(home / "target")
    proc.save_pretrained(home / "target")
    return write_picture_rows(home, PROMPT)


@pytest.mark.parametrize("method", ["msd", "flash"])
def test_train_feature_drafter_on_qwen_vl(checkpoint, greedy_reference, method):
    from mmspec.cli import main

    out = checkpoint / method
    extra = ["--compress-tokens", "2", "--sar-tokens", "2"] if method == "flash" else []
    rc = main(["train", method, "--target", str(checkpoint / "target"), "--data", str(checkpoint / "rows.jsonl"),
               "--stage1-steps", "2", "--stage2-steps", "2", "--batch-size", "2", "--out", str(out), *extra])
    assert rc == 0
    gen = VLMGenerator.from_pretrained(str(checkpoint / "target"), str(out), method=method)
    images = [pictures()[0], pictures()[2]]
    res = gen.generate(images=images, prompts=[PROMPT, PROMPT], max_new_tokens=8)
    inputs = gen.prepare(images, [PROMPT, PROMPT])
    tok = gen.tokenizer
    ref = greedy_reference(gen.target, max_new_tokens=8, eos_token_id=tok.eos_token_id,
                           pad_token_id=tok.pad_token_id, **inputs)
    assert torch.equal(res.sequences, ref)
    pipe = mmspec.pipeline(str(checkpoint / "target"), drafter=str(out))  # checkpoint dirs, method read off
    assert pipe.method == method
    assert torch.equal(pipe.generate(images=images, prompts=[PROMPT, PROMPT], max_new_tokens=8).sequences, ref)


def _half_answered_rows(checkpoint, tmp_path):
    """The checkpoint's rows twice: with their responses, and without (the target answers those)."""
    import json

    rows = [json.loads(line) for line in (checkpoint / "rows.jsonl").read_text().splitlines()]
    rows = rows + [{k: v for k, v in r.items() if k != "response"} for r in rows]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return data


def _dflash_decodes_exactly(checkpoint, drafter_dir, images, greedy_reference, **kw):
    """The trained DFlash drafter through VLMGenerator (with ``kw``) gives plain greedy decoding's sequences;
    returns them."""
    gen = VLMGenerator.from_pretrained(str(checkpoint / "target"), str(drafter_dir), method="dflash", **kw)
    res = gen.generate(images=images, prompts=[PROMPT, PROMPT], max_new_tokens=8)
    tok = gen.tokenizer
    ref = greedy_reference(gen.target, max_new_tokens=8, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                           **gen.prepare(images, [PROMPT, PROMPT]))
    assert torch.equal(res.sequences, ref), kw
    return ref


def test_train_dflash_on_qwen_vl_answers_and_decodes_exactly(checkpoint, greedy_reference, tmp_path):
    """`mmspec train dflash` against a VLM checkpoint: rows of image + prompt (the target answers those without a
    response, its picture in view), the features over the placeholders computed with the pictures; the saved
    drafter decodes exactly through VLMGenerator and mmspec.pipeline (method read off the directory)."""
    import json

    from mmspec.cli import main

    data = _half_answered_rows(checkpoint, tmp_path)
    out = tmp_path / "dflash"
    rc = main(["train", "dflash", "--target", str(checkpoint / "target"), "--data", str(data), "--mask-token-id", "9",
               "--layers", "1", "--block-size", "4", "--steps", "3", "--batch-size", "2", "--anchors", "2",
               "--max-new-tokens", "6", "--out", str(out)])
    assert rc == 0
    assert json.loads((out / "mmspec.json").read_text())["route"] == "vlm"
    report = json.loads((out / "train_report.json").read_text())
    assert report["steps"] == 3 and report["heldout_after"]["blocks"] > 0
    images = [pictures()[0], pictures()[2]]
    for kw in (dict(), dict(tree_nodes=4)):
        ref = _dflash_decodes_exactly(checkpoint, out, images, greedy_reference, **kw)
    pipe = mmspec.pipeline(str(checkpoint / "target"), drafter=str(out))
    assert pipe.method == "dflash"
    assert torch.equal(pipe.generate(images=images, prompts=[PROMPT, PROMPT], max_new_tokens=8).sequences, ref)


def test_train_dflash_with_visual_queries_decodes_compressed_pictures_exactly(checkpoint, greedy_reference, tmp_path,
                                                                            capsys):
    """`--visual-queries 2`: the drafter trains on the full and compressed settings (0, 1, 2) and decodes exactly
    with each picture in its context as 1 or 2 entries (`compress_to`), through VLMGenerator and the pipeline."""
    import json

    from mmspec.cli import main

    out = tmp_path / "dflash-c"
    data = _half_answered_rows(checkpoint, tmp_path)
    rc = main(["train", "dflash", "--target", str(checkpoint / "target"), "--data", str(data),
               "--mask-token-id", "9", "--layers", "1", "--block-size", "4", "--steps", "3", "--batch-size", "2",
               "--anchors", "2", "--visual-queries", "2", "--out", str(out)])
    assert rc == 0
    report = json.loads((out / "train_report.json").read_text())
    assert report["config"]["compress_choices"] == [0, 1, 2] and set(report["heldout_after_by_setting"]) == {
        "0", "1", "2"}
    images = [pictures()[0], pictures()[2]]
    for n in (1, 2):
        ref = _dflash_decodes_exactly(checkpoint, out, images, greedy_reference, compress_to=n)
    pipe = mmspec.pipeline(str(checkpoint / "target"), drafter=str(out), compress_to=1)
    assert torch.equal(pipe.generate(images=images, prompts=[PROMPT, PROMPT], max_new_tokens=8).sequences, ref)
    assert main(["train", "dflash", "--target", str(checkpoint / "target"), "--data", str(data),
                 "--visual-queries", "2", "--compress-choices", "0,3", "--out", str(tmp_path / "bad")]) == 2
    assert "--compress-choices 0,3 must lie in 0..--visual-queries" in capsys.readouterr().err
