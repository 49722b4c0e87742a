"""`mmspec generate`: streams the same text the pipeline generates, on a text and a VLM zoo target, with the
call's stats; bad requests are one `mmspec: error:` line."""

import json

import pytest

import mmspec
from mmspec.cli import main
from mmspec.zoo import vlm_data as vd

PROMPT = "def add(a, b):\n"


def test_streams_the_pipelines_text_and_stats(capsys):
    assert main(["generate", "--model", "zoo:code-target", "--escapes", "def add(a, b):\\n",
                 "--max-new-tokens", "24"]) == 0
    out = capsys.readouterr()
    ref = mmspec.pipeline("zoo:code-target")(PROMPT, max_new_tokens=24)
    assert out.out == ref.texts[0] + "\n"  # TextStreamer ends the stream with a newline
    assert "[dflash] τ " in out.err and "24 tokens in" in out.err and "tokens/s" in out.err


def test_json_lines_one_per_prompt_with_sampling(capsys):
    assert main(["generate", "--json", "--method", "prompt-lookup", "--do-sample", "--temperature", "0.7",
                 "--seed", "3", "--max-new-tokens", "16", "x = 1\n", "def f():"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["prompt"] for r in rows] == ["x = 1\n", "def f():"]
    pipe = mmspec.pipeline("zoo:code-target", method="prompt-lookup")
    for i, r in enumerate(rows):
        ref = pipe(r["prompt"], max_new_tokens=16, do_sample=True, temperature=0.7, seed=3 + i)
        assert r["text"] == ref.texts[0] and r["method"] == "prompt-lookup" and r["new_tokens"] == ref.new_tokens
        assert r["tau"] >= 1.0


def test_vlm_answers_about_a_picture(tmp_path, capsys):
    scene = vd.scenes("test", 1)[0]
    path = tmp_path / "scene.png"
    scene.image().save(path)
    assert main(["generate", "--model", "zoo:vlm-target", "--image", str(path), "--no-stream",
                 "--max-new-tokens", "24", vd.CAPTION_PROMPT]) == 0
    out = capsys.readouterr()
    gen = mmspec.pipeline("zoo:vlm-target")
    ref = gen.generate(images=[scene.image()], prompts=[vd.with_image(vd.CAPTION_PROMPT)], max_new_tokens=24)
    assert out.out.strip() == ref.texts[0] and ref.texts[0]
    assert "[dflash] τ " in out.err


@pytest.mark.parametrize("argv,message", [
    (["--max-new-tokens", "0", "x"], "--max-new-tokens must be >= 1"),
    (["--image", "nope.png", "x"], "text-only target"),
    (["--dtype", "int8", "x"], "dtype must be a floating torch dtype"),
    (["--model", "zoo:image-target", "x"], "use `mmspec image --model"),
    (["--method", "msd", "x"], "method"),
    (["   "], "empty prompt"),
])
def test_bad_requests_are_one_error_line(argv, message, capsys):
    assert main(["generate", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mmspec: error:") and message in err, err
