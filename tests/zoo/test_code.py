"""The code family of the zoo: deterministic data split by module, micro build, load, checksum."""

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters import AutoregressiveDrafter
from mmspec.zoo import load
from mmspec.zoo.code import checksum_input, function_body
from mmspec.zoo.code_data import completion_prompts, completion_training_prompts, list_modules, load_corpus, split_of
from mmspec.zoo.builder import build
from mmspec.zoo.home import read_json


def test_split_is_by_module_and_deterministic():
    corpus = load_corpus()
    again = load_corpus()
    assert corpus.files == again.files
    train, val, test = (set(corpus.files[s]) for s in ("train", "val", "test"))
    assert not (train & val) and not (train & test) and not (val & test)
    assert len(train) > 10 * len(test) > 0
    assert all(split_of(m) == "test" for m in test)
    assert not any("/test/" in m or m.startswith("test/") for m in list_modules())


def test_prompts_come_from_held_out_modules():
    corpus = load_corpus()
    prompts = completion_prompts(corpus, "test", limit=10)
    assert prompts and all(p.module in corpus.files["test"] for p in prompts)
    for p in prompts:
        assert p.prompt.startswith(("def ", "async def ", "@"))
        assert '"""' in p.prompt or "'''" in p.prompt


def test_training_prompts_are_the_suites_kind_from_training_modules():
    """Stage 3 of code-dflash trains on these: each training function cut after its docstring (as the suite cuts the
    held-out ones) and after a few leading lines of its body, never from a held-out module, the same every call."""
    corpus = load_corpus()
    prompts = completion_training_prompts(corpus, "train", per_function=3, seed=1)
    heads = {}  # a head -> the bodies under it (a few modules repeat a function's head with another body)
    for p in completion_prompts(corpus, "train", min_body_lines=2, max_body_lines=120):
        heads.setdefault(p.prompt, []).append(p.reference)
    test_heads = {p.prompt for p in completion_prompts(corpus, "test", min_body_lines=2, max_body_lines=120)}
    assert prompts == completion_training_prompts(corpus, "train", per_function=3, seed=1)
    assert prompts != completion_training_prompts(corpus, "train", per_function=3, seed=2)
    assert set(heads) <= set(prompts) and not (set(prompts) & test_heads)
    assert len(heads) < len(prompts) <= 3 * len(heads)
    for text in prompts:
        head = max((h for h in heads if text.startswith(h)), key=len)
        assert not text.endswith("\n")
        if text != head:  # a cut inside the body: its first lines, whole
            rest = text[len(head) + 1:]
            assert any(body.startswith(rest + "\n") and rest.count("\n") + 1 < len(body.splitlines())
                       for body in heads[head])


def test_function_body_stops_at_dedent():
    assert function_body("    x = 1\n    return x\n\ndef other():\n    pass") == "    x = 1\n    return x\n\n"
    assert function_body("    x = 1\n    return (x +") == "    x = 1\n"


def test_micro_build_loads_and_matches_checksum(tmp_path, greedy_reference):
    metrics = build("code", micro=True, home=tmp_path, progress=False)
    assert set(metrics) == {"code-target", "code-drafter", "code-dlm", "code-deer-s1", "code-deer", "code-ngram",
                            "code-dflash", "code-eagle"}
    for name in ("code-target", "code-drafter"):
        m = read_json(tmp_path / name / "metrics.json")
        for key in ("heldout_loss_nats_per_token", "parse_rate", "distinct_2", "steps", "stopped"):
            assert key in m
        entry = load(name, home=tmp_path)
        assert "model.safetensors" in entry.config["files"]  # the build recorded the file hashes load checks
        with torch.no_grad():
            logits = entry.model(checksum_input(entry.tokenizer)).logits.double()
        assert abs(float(logits.sum()) - entry.config["checksum"]["sum"]) < 1e-3 * max(1.0, abs(entry.config["checksum"]["sum"]))
        torch.testing.assert_close(logits.flatten()[:8], torch.tensor(entry.config["checksum"]["first"], dtype=torch.double))
    grown = read_json(tmp_path / "code-target" / "metrics.json")["growth"]
    assert grown["trained_layers"] - len(grown["pruned"]) == load("code-target", home=tmp_path).model.config.num_hidden_layers
    assert (tmp_path / ".build" / "code-distill" / "target.json").exists()  # the drafters' data names its target
    # the micro pair runs through the engine, exactly
    target, draft = load("code-target", home=tmp_path), load("code-drafter", home=tmp_path)
    ids = target.tokenizer("def f(x):\n", return_tensors="pt").input_ids
    out = SpeculativeGenerator(target.model, AutoregressiveDrafter(draft.model, num_tokens=3)).generate(
        ids, max_new_tokens=12, eos_token_id=[])
    ref = greedy_reference(target.model, ids, 12)
    assert torch.equal(out.sequences, ref)

    # the diffusion drafters load, reproduce their checksums and draft exactly
    from mmspec.drafters import DEERDrafter
    from mmspec.drafters.diffuspec import DiffuSpecDrafter
    from mmspec.zoo.code import checksum
    from mmspec.loading import zoo_diffusion_lm

    for name in ("code-dlm", "code-deer-s1", "code-deer", "code-ngram", "code-dflash", "code-eagle"):
        entry = load(name, home=tmp_path)
        got, rec = checksum(entry), entry.config["checksum"]
        assert abs(got["sum"] - rec["sum"]) <= 1e-4 * max(1.0, abs(rec["sum"])), name
    report = read_json(tmp_path / "code-deer" / "metrics.json")
    assert {"start", "after_stage1", "after_stage2"} <= set(report["agreement"])
    assert {"start", "after_stage1", "after_stage2"} <= set(report["tau"])  # τ of DEER decoding per stage
    assert "tau_gain_stages_1_2" in report
    # the stages (and code-dlm) keep the weights with the longest held-out accepted run, not the lowest loss
    dlm_metrics = read_json(tmp_path / "code-dlm" / "metrics.json")
    for rec in (report["stage1"], report["stage2"], dlm_metrics):
        assert rec["selected_on"].startswith("held-out accepted length")
        assert rec["best_val_accepted"] == max(v for _, v in rec["val_history"])
    vocab = target.model.config.vocab_size
    ngram = load("code-ngram", home=tmp_path).model
    for drafter in (DEERDrafter(zoo_diffusion_lm(load("code-deer", home=tmp_path), target_vocab_size=vocab),
                                num_tokens=4),
                    DiffuSpecDrafter(zoo_diffusion_lm(load("code-dlm", home=tmp_path), target_vocab_size=vocab),
                                     causal=ngram, eos_token_id=1, lattice=True)):
        out = SpeculativeGenerator(target.model, drafter).generate(ids, max_new_tokens=12, eos_token_id=[])
        assert torch.equal(out.sequences, ref)

    # the block drafter and the feature drafter: two training stages recorded with real-decoding tau, exact drafting
    from mmspec.drafters.dflash import DFlashDrafter
    from mmspec.drafters.feature import FeatureDrafter

    block = read_json(tmp_path / "code-dflash" / "metrics.json")
    assert set(block["stages"]) == {"1", "2", "3", "4"}  # corpus windows x2, answers, answers to packages
    assert block["stages"]["2"]["train_rows"] > block["stages"]["1"]["train_rows"] and block["stages"]["3"]["steps"] > 0
    assert block["heldout_set"].startswith("stages 3-4's validation rows")
    assert {"chain15", "chain8"} <= set(block["tau_decode"]) and all(t >= 1.0 for t in block["tau_decode"].values())
    assert len(block["heldout_shipped"]["slot_agreement"]) == 15
    # its draft vocabulary: every id of the target's answers to stage 3's training prompts, shipped in its config
    shipped = load("code-dflash", home=tmp_path).model
    assert shipped.draft_vocab and len(shipped.draft_vocab) == block["draft_vocab_ids"] < shipped.config.vocab_size
    assert "tau_chain8" in read_json(tmp_path / "code-eagle" / "metrics.json")
    for drafter in (DFlashDrafter(load("code-dflash", home=tmp_path).model, target.model, tree_nodes=6),
                    FeatureDrafter(load("code-eagle", home=tmp_path).model, target.model, num_tokens=4)):
        out = SpeculativeGenerator(target.model, drafter).generate(ids, max_new_tokens=12, eos_token_id=[])
        assert torch.equal(out.sequences, ref)

    # the code benchmark suite runs every text method on the micro zoo, exactly
    from mmspec.eval.code_suite import CODE_METHODS, run_code_suite

    report = run_code_suite(num_prompts=2, max_new_tokens=8, home=tmp_path, progress=False)
    assert [r["method"] for r in report["results"]] == CODE_METHODS
    for r in report["results"]:
        assert r["exact"] == 1.0, r["method"]
        if r["method"].startswith(("deer", "diffuspec", "mmspec", "dflash", "eagle")):
            assert r["tau"] >= 1.0 and r["accept_lengths"]
            assert sum(r["accept_lengths"]) == 2 * 8  # per step emitted tokens, over both prompts


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_micro_build_on_cuda_runs_every_model_there(tmp_path, monkeypatch):
    """``--device cuda``: every forward of the build (training, validation, distillation data, τ, ablation,
    completions) runs on the GPU; a model left on the CPU would train there silently, since batches follow the
    model. Only the ``zoo.json`` fingerprints are computed on the CPU, on purpose (device-independent)."""
    import traceback

    from transformers import LlamaForCausalLM

    seen, forward = [], LlamaForCausalLM.forward

    def recording(self, *args, **kwargs):
        stack = [f.name for f in traceback.extract_stack()[:-1]]
        seen.append((self.device.type, "checksum" in stack))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(LlamaForCausalLM, "forward", recording)
    build("code", micro=True, home=tmp_path, progress=False, device="cuda")
    assert any(dev == "cuda" for dev, _ in seen)
    assert all(dev == "cuda" or in_checksum for dev, in_checksum in seen)


def test_drafter_loss_reads_real_tokens_only_and_equals_the_full_logits_loss():
    """generation_loss runs the LM head on the rows' real tokens (not their padding) and gives the loss of the
    full logits: continuation CE plus a quarter of the prefix CE (sharpened weights)."""
    from mmspec.tiny import tiny_model
    from mmspec.zoo.code import generation_loss
    from tests.tiny_models import sharpen

    model = sharpen(tiny_model("llama", seed=0, vocab_size=64, num_layers=1))
    g = torch.Generator().manual_seed(0)
    col = torch.arange(20)[None]
    rows = col < torch.tensor([20, 15, 12, 18])[:, None]
    cont = (col >= torch.tensor([5, 7, 4, 9])[:, None]) & rows
    tokens = torch.where(rows, torch.randint(3, 64, (4, 20), generator=g), 0)
    with torch.no_grad():
        got = generation_loss(model, {"tokens": tokens, "continuation": cont, "rows": rows})
        logits = model(input_ids=tokens[:, :-1]).logits.float()
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), tokens[:, 1:].reshape(-1), reduction="none").view(4, -1)
    on_cont, on_prefix = cont[:, 1:], rows[:, 1:] & ~cont[:, 1:]
    want = (ce * on_cont).sum() / on_cont.sum() + 0.25 * (ce * on_prefix).sum() / on_prefix.sum()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_drafter_data_of_another_target_is_refused(tmp_path):
    from mmspec.zoo.code_distill import _check_target_stamp

    work = tmp_path / ".build" / "code-distill"
    (tmp_path / "code-target").mkdir()
    (tmp_path / "code-target" / "zoo.json").write_text('{"checksum": {"sum": 1.5}}')
    _check_target_stamp(tmp_path, work)
    _check_target_stamp(tmp_path, work)  # the same target: its generations and drafter checkpoints are reused
    (tmp_path / "code-target" / "zoo.json").write_text('{"checksum": {"sum": 2.5}}')  # the target was rebuilt
    with pytest.raises(ValueError, match="another code-target"):
        _check_target_stamp(tmp_path, work)
