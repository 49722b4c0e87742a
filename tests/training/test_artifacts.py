"""`mmspec train ...` on the micro zoo: every subcommand leaves a self-describing directory (mmspec.json) that the
pipeline and `mmspec eval` use with the right method by default; a kill mid-training followed by `--resume` ends
where an uninterrupted run ends; the output appears whole or not at all; bad training data is refused before
any training with file:line."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import mmspec
from mmspec.cli import main
from mmspec.loading import read_record
from mmspec.training import artifact
from tests.tiny_models import sharpen


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    from mmspec.zoo.builder import build

    root = tmp_path_factory.mktemp("microzoo")
    build("code", micro=True, home=root, progress=False)
    build("image", micro=True, home=root, progress=False)
    return root


@pytest.fixture
def zoo_env(home, monkeypatch):
    monkeypatch.setenv("MMSPEC_HOME", str(home))
    return home


DEER_ARGS = ["train", "deer", "--stage1-steps", "2", "--stage2-steps", "3", "--samples", "4", "--val-samples", "4",
        "--checkpoint-every", "0"]


@pytest.fixture(scope="module")
def code_files(tmp_path_factory):
    """A small --data corpus (tokenising the zoo's whole corpus would dominate these tests)."""
    import mmspec.generator as a, mmspec.tree as b, mmspec.cache as c

    root = tmp_path_factory.mktemp("code")
    for m in (a, b, c):
        (root / Path(m.__file__).name).write_text(Path(m.__file__).read_text())
    return ["--data", str(root / "*.py")]


def weights(path):
    return load_file(str(path / "model.safetensors"))


def test_deer_killed_resumes_and_its_output_is_a_deer_drafter(zoo_env, code_files, tmp_path, monkeypatch, capsys,
                                                              greedy_reference):
    from mmspec.training import deer

    DEER = DEER_ARGS + code_files

    ref = tmp_path / "ref"
    assert main(DEER + ["--out", str(ref)]) == 0
    record = json.loads((ref / "mmspec.json").read_text())
    assert record["kind"] == "diffusion-lm" and record["method"] == "deer" and record["route"] == "text"
    assert record["mask_token_id"] == 2 and record["convention"] == "dream"
    assert record["target"]["spec"] == "zoo:code-target" and record["target"]["vocab_size"] > 0
    assert not artifact.checkpoint_dir(ref).exists()  # checkpoints go once the output is in place

    out = tmp_path / "run"
    real, calls = deer.stage2_batch, []

    def dying(*a, **kw):  # a kill in the middle of stage II
        calls.append(1)
        if len(calls) == 3:  # the validation batch, step 0 (checkpointed), then the kill at step 1
            raise KeyboardInterrupt("killed")
        return real(*a, **kw)

    monkeypatch.setattr(deer, "stage2_batch", dying)
    assert main(DEER + ["--out", str(out)]) == 130  # the kill: one line, exit 130, checkpoints kept
    monkeypatch.setattr(deer, "stage2_batch", real)
    ckpt = artifact.checkpoint_dir(out)
    assert not out.exists() and (ckpt / "stage1.pt").exists() and (ckpt / "stage2.pt").exists()
    assert main(DEER + ["--out", str(out)]) == 2  # a checkpoint left behind: continue or delete, never mixed
    assert "--resume" in capsys.readouterr().err
    assert main(DEER + ["--stage2-steps", "4", "--out", str(out), "--resume"]) == 2
    assert "stage2_steps" in capsys.readouterr().err  # other settings: refused, naming the difference
    assert main(DEER + ["--out", str(out), "--resume"]) == 0
    a, b = weights(ref), weights(out)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    from mmspec.drafters import DiffusionLM

    dlm = DiffusionLM.from_pretrained(out)  # the record tells its convention and mask id
    assert dlm.convention == "dream" and dlm.mask_token_id == 2
    assert mmspec.pipeline("zoo:code-target", drafter=str(out), method="deer").method == "deer"
    # the pipeline runs it as DEER by default, exactly
    pipe = mmspec.pipeline("zoo:code-target", drafter=str(out))
    assert pipe.method == "deer" and type(pipe.drafter).__name__ == "DEERDrafter"
    sharpen(pipe.model)
    ids = torch.tensor([[5, 17, 33, 9, 41, 12, 7]])
    res = pipe(ids, max_new_tokens=12, stop_at_eos=False)
    ref_ids = greedy_reference(pipe.model, ids, 12, attention_mask=torch.ones_like(ids))
    assert torch.equal(res.sequences, ref_ids)
    with pytest.raises(ValueError, match="trained for text targets"):
        mmspec.pipeline("zoo:image-target", drafter=str(out))


def test_eval_uses_a_trained_dlm(zoo_env, code_files, tmp_path):
    DEER = DEER_ARGS + code_files
    out = tmp_path / "deer"
    assert main(DEER + ["--out", str(out)]) == 0
    run = tmp_path / "eval"
    assert main(["eval", "--suite", "code", "--methods", "deer", "--dlm", str(out), "--prompts", "1",
                 "--max-new-tokens", "6", "--out", str(run), "--home", str(zoo_env), "--no-progress"]) == 0
    results = json.loads((run / "results.json").read_text())
    recs = [r for r in results["suites"]["code"]["records"] if r["method"] == "deer"]
    assert recs and all(r["exact"] for r in recs)
    assert str(out) in (run / "config.yaml").read_text()


def test_image_drafter_trained_then_used_by_pipeline_cli_and_eval(zoo_env, tmp_path, monkeypatch):
    from mmspec.training import image_feature

    out = tmp_path / "img"
    args = ["train", "image-drafter", "--steps", "3", "--samples", "8", "--val-samples", "4", "--batch-size", "4",
            "--sar-tokens", "2", "--checkpoint-every", "0", "--out", str(out)]
    real = image_feature.sequence_batches

    def dying(seqs, batch_size, seed, features=None):  # the training batches die at step 2
        fn = real(seqs, batch_size, seed, features)

        def batches(step, mix=0.0):
            if batch_size == 4 and step == 2:
                raise KeyboardInterrupt("killed")
            return fn(step, mix)
        return batches

    monkeypatch.setattr(image_feature, "sequence_batches", dying)
    assert main(args) == 130  # the kill: one line, exit 130, checkpoints kept
    monkeypatch.setattr(image_feature, "sequence_batches", real)
    assert not out.exists() and (artifact.checkpoint_dir(out) / "samples.pt").exists()
    assert main(args + ["--resume"]) == 0
    record = json.loads((out / "mmspec.json").read_text())
    assert record["route"] == "image" and record["drafter"] == "sar" and record["kind"] == "feature-drafter"

    pipe = mmspec.pipeline("zoo:image-target", drafter=str(out), method="spec")
    assert pipe.drafter_kind == "sar" and pipe.generator.feature_drafters["sar"].config.sar_tokens == 2
    spec = pipe.generate([0, 1], temperature=0, tree="chain")
    plain = pipe.generate([0, 1], temperature=0, method="ar")
    assert torch.equal(spec.codes, plain.codes) and spec.config["drafter"] == "sar"
    # feature_drafter= / sar_drafter= replace the zoo's own (no longer silently ignored)
    zoo_sar = mmspec.pipeline("zoo:image-target").generator.feature_drafters["sar"]
    mine = mmspec.pipeline("zoo:image-target", sar_drafter=str(out)).generator.feature_drafters["sar"]
    assert mine is not zoo_sar and mine.config.sar_tokens == 2

    run = tmp_path / "image"
    assert main(["image", "--method", "spec", "--drafter", str(out), "--classes", "0", "--temperature", "0",
                 "--tree", "chain", "--out", str(run)]) == 0
    stats = json.loads((run / "stats.json").read_text())
    assert stats["drafter"] == "sar" and stats["drafter_path"] == str(out)
    assert "delta" not in stats and "lam" not in stats and "lantern_k" not in stats  # spec applies no bound

    ev = tmp_path / "eval"
    assert main(["eval", "--suite", "image", "--methods", "spec-chain-sar", "--image-drafter", str(out), "--classes",
                 "0", "--image-temperature", "0", "--image-latency", "0", "--no-quality", "--no-plots",
                 "--out", str(ev), "--home", str(zoo_env), "--no-progress"]) == 0
    recs = [r for r in json.loads((ev / "results.json").read_text())["suites"]["image"]["records"]
            if r["method"] == "spec-chain-sar"]
    assert recs and all(r["exact"] for r in recs)
    assert str(out) in (ev / "config.yaml").read_text()


@pytest.fixture(scope="module")
def vlm_home(home):
    from mmspec.zoo.builder import build

    build("vlm", micro=True, home=home, progress=False)
    return home


FEATURE = ["--stage1-steps", "2", "--stage2-steps", "3", "--batch-size", "4", "--scenes", "16", "--checkpoint-every",
           "0"]


def _feature_run(method, home, tmp_path, monkeypatch):
    monkeypatch.setenv("MMSPEC_HOME", str(home))
    out = tmp_path / method
    assert main(["train", method, *FEATURE, "--out", str(out)]) == 0
    record = json.loads((out / "mmspec.json").read_text())
    assert record["method"] == method and record["route"] == "vlm" and record["kind"] == "feature-drafter"
    pipe = mmspec.pipeline("zoo:vlm-target", drafter=str(out))
    assert pipe.method == method  # picked up from the drafter, not the zoo's default (msd)
    return out


def test_msd_killed_resumes_then_serves_pipeline_and_eval(vlm_home, tmp_path, monkeypatch):
    from mmspec.zoo import vlm_drafters

    ref = _feature_run("msd", vlm_home, tmp_path, monkeypatch)
    out = tmp_path / "killed"
    real = vlm_drafters.zoo_batches

    def dying(enc, pool, batch_size, seed):
        fn = real(enc, pool, batch_size, seed)

        def batches(step, mix):
            if batch_size == 4 and step == 1_000_001:  # stage 2, step 1
                raise KeyboardInterrupt("killed")
            return fn(step, mix)
        return batches

    monkeypatch.setattr(vlm_drafters, "zoo_batches", dying)
    assert main(["train", "msd", *FEATURE, "--out", str(out)]) == 130  # the kill: one line, exit 130
    monkeypatch.setattr(vlm_drafters, "zoo_batches", real)
    assert not out.exists() and (artifact.checkpoint_dir(out) / "stage2.pt").exists()
    assert main(["train", "msd", *FEATURE, "--out", str(out), "--resume"]) == 0
    a, b = weights(ref), weights(out)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    run = tmp_path / "eval"
    assert main(["eval", "--suite", "vlm", "--methods", "msd-chain", "--vlm-drafter", str(out), "--prompts", "1",
                 "--max-new-tokens", "6", "--no-plots", "--out", str(run), "--home", str(vlm_home),
                 "--no-progress"]) == 0
    recs = [r for r in json.loads((run / "results.json").read_text())["suites"]["vlm"]["records"]
            if r["method"] == "msd-chain"]
    assert recs and all(r["exact"] for r in recs)
    assert str(out) in (run / "config.yaml").read_text()


@pytest.mark.parametrize("method", ["eagle", "flash"])
def test_feature_drafters_trained_then_used(method, vlm_home, tmp_path, monkeypatch):
    _feature_run(method, vlm_home, tmp_path, monkeypatch)


def test_feature_training_options_that_do_not_apply_are_refused(home, tmp_path, capsys):
    data = tmp_path / "rows.jsonl"
    data.write_text("{}\n")
    assert main(["train", "msd", "--data", str(data), "--out", str(tmp_path / "a")]) == 2
    assert "--data is for checkpoint targets" in capsys.readouterr().err
    assert main(["train", "eagle", "--target", str(tmp_path), "--scenes", "10", "--data", str(data), "--out",
                 str(tmp_path / "b")]) == 2
    assert "--scenes applies to the zoo target only" in capsys.readouterr().err
    assert main(["train", "image-drafter", "--layout", str(data), "--out", str(tmp_path / "c")]) == 2
    assert "--layout is for checkpoint targets" in capsys.readouterr().err
    assert not (tmp_path / "a.ckpt").exists()


def test_training_rows_checked_up_front_with_file_and_line(tmp_path):
    from mmspec.training.feature import read_training_rows

    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(b"png")
    rows = tmp_path / "data" / "rows.jsonl"
    rows.parent.mkdir()
    good = {"image": "../pics/a.png", "prompt": "<image>\nWhat is it?", "response": "A cat."}
    rows.write_text("\n".join([json.dumps(good), "not json", json.dumps({**good, "image": "missing.png"}),
                               json.dumps({"image": "../pics/a.png", "prompt": "no placeholder", "response": "x"}),
                               json.dumps({"prompt": "<image>"})]) + "\n")
    with pytest.raises(ValueError) as err:
        read_training_rows(str(rows), "<image>")
    msg = str(err.value)
    assert "4 bad training row(s)" in msg
    for line, what in ((2, "not JSON"), (3, "missing.png does not exist"), (4, "lacks the image placeholder"),
                       (5, "missing or empty field(s) ['image', 'response']")):
        assert f"{rows}:{line}: " in msg and what in msg
    rows.write_text(json.dumps(good) + "\n")
    [row] = read_training_rows(str(rows), "<image>")  # relative to the data file, as in mmspec eval
    assert Path(row["image"]).resolve() == (tmp_path / "pics" / "a.png").resolve()


def test_training_rows_leave_the_callers_processor_as_it_was(tmp_path):
    """User rows are right-padded for training whatever the processor's tokenizer is set to, and the caller's
    processor keeps its own padding side."""
    from transformers import LlavaProcessor

    from mmspec.training.feature import jsonl_batches
    from mmspec.zoo import vlm_data as vd
    from mmspec.zoo import zoo_home

    processor = LlavaProcessor.from_pretrained(zoo_home() / "vlm-target")
    processor.tokenizer.padding_side = "left"
    rows = []
    for i, sc in enumerate(vd.scenes("train", 2)):
        sc.image().save(tmp_path / f"{i}.png")
        prompt = vd.with_image(vd.CAPTION_PROMPT if i else vd.QUESTION_PROMPT.format(question="what is it?"))
        rows.append({"image": f"{i}.png", "prompt": prompt, "response": " " + sc.caption})
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    batch = jsonl_batches(str(tmp_path / "rows.jsonl"), processor, batch_size=4, seed=0)(0, 1.0)
    assert batch["attention_mask"][:, 0].all() and not batch["attention_mask"].all()  # right-padded, ragged
    assert processor.tokenizer.padding_side == "left"


def test_output_appears_whole_or_not_at_all(tmp_path):
    out = tmp_path / "drafter"

    def good(d):
        (d / "model.safetensors").write_text("v1")

    artifact.prepare_run(out, False, {"a": 1})
    artifact.write_artifact(out, good, {"kind": "diffusion-lm", "route": "text"})
    assert read_record(out)["kind"] == "diffusion-lm" and not artifact.checkpoint_dir(out).exists()

    def dies(d):
        (d / "model.safetensors").write_text("v2, half")
        raise KeyboardInterrupt("killed while saving")

    with pytest.raises(KeyboardInterrupt):
        artifact.write_artifact(out, dies, {"kind": "diffusion-lm"})
    assert (out / "model.safetensors").read_text() == "v1"  # the previous drafter, untouched
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not the output of an earlier"):
        artifact.prepare_run(tmp_path / "other", False, {})
