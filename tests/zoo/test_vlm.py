"""VLM family of the zoo: procedural scenes, and a MICRO build (LLaVA target + text-only drafter) that must
load back, reproduce its recorded checksums and run through the speculative engine exactly."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from mmspec import SpeculativeGenerator  # noqa: E402
from mmspec.drafters import AutoregressiveDrafter  # noqa: E402
from mmspec.zoo import load, vlm  # noqa: E402
from mmspec.zoo import vlm_data as vd  # noqa: E402
from mmspec.zoo import vlm_examples  # noqa: E402
from mmspec.zoo.builder import build  # noqa: E402
from mmspec.zoo.home import read_json  # noqa: E402
from tests.tiny_models import sharpen  # noqa: E402


def test_scenes_are_deterministic_and_consistent():
    a, b = vd.scenes("val", 6), vd.scenes("val", 6)
    for x, y in zip(a, b):
        assert x.caption == y.caption and x.image().tobytes() == y.image().tobytes()
    for sc in vd.scenes("train", 40):
        assert 1 <= len(sc.objects) <= 3
        assert len({o.shape for o in sc.objects}) == len(sc.objects)  # every question has one answer
        assert len({o.colour for o in sc.objects}) == len(sc.objects)
        kinds = {q.kind for q in sc.questions}
        assert kinds == set(vd.QUESTION_TYPES)
        count = next(q for q in sc.questions if q.kind == "count")
        assert count.answer == vd.NUMBERS[len(sc.objects)]
        assert sc.image().size == (vd.IMAGE_SIZE, vd.IMAGE_SIZE)
    assert len(vd.SHAPES) >= 5 and len(vd.COLOURS) >= 6


def test_splits_are_disjoint():
    assert vd.split_of_seed(vd.split_seed("test", 3)) == "test"
    spans = sorted(vd.SPLITS.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    with pytest.raises(IndexError):
        vd.split_seed("val", 10**9)


def test_object_pixels_carry_its_colour():
    sc = vd.make_scene(vd.split_seed("test", 11))
    img = vlm_examples.pixel_tensor([sc.image()])[0].permute(1, 2, 0).add(1).mul(127.5)  # back to 0..255, HWC
    for o in sc.objects:
        centre = img[int(o.cy), int(o.cx)]
        assert (centre - torch.tensor(vd.COLOURS[o.colour], dtype=torch.float)).abs().max() < 40


def test_processor_ids_match_the_encoder(tmp_path):
    from mmspec.zoo.code_data import ensure_tokenizer

    tok = ensure_tokenizer(tmp_path, micro=True)
    proc = vlm.make_processor(tok)
    enc = vlm_examples.Encoder(tok, vlm.num_image_tokens())
    sc = vd.make_scene(vd.split_seed("val", 2))
    q = sc.questions[0]
    ids = proc(images=[sc.image()], text=[vd.with_image(q.prompt)], return_tensors="pt")
    assert ids["input_ids"][0].tolist() == enc.prompt_ids(q)
    torch.testing.assert_close(ids["pixel_values"], vlm_examples.pixel_tensor([sc.image()]))


def test_micro_build_loads_checksums_and_runs_exactly(tmp_path, greedy_reference):
    metrics = build("vlm", micro=True, home=tmp_path, progress=False)
    assert set(metrics) == set(vlm.NAMES)
    for name in vlm.BASE_NAMES:
        m = read_json(tmp_path / name / "metrics.json")
        for key in ("accuracy", "accuracy_by_type", "held_out_loss", "caption_word_accuracy", "train"):
            assert key in m, (name, key)
        entry = load(name, home=tmp_path)
        got, rec = vlm.checksum(entry), entry.config["checksum"]
        assert got["sum"] == pytest.approx(rec["sum"], rel=1e-4, abs=1e-3)
        assert got["first"] == pytest.approx(rec["first"], rel=1e-4, abs=1e-4)
    assert "vision" in read_json(tmp_path / "vlm-target" / "metrics.json")["train"]

    target, draft = load("vlm-target", home=tmp_path), load("vlm-drafter", home=tmp_path)
    scenes = vd.scenes("test", 2)
    inputs = target.tokenizer(images=[sc.image() for sc in scenes],
                              text=[vd.with_image(sc.questions[0].prompt) for sc in scenes], return_tensors="pt")
    ref = greedy_reference(target.model, max_new_tokens=10, **inputs)
    out = SpeculativeGenerator(target.model, AutoregressiveDrafter(draft.model, num_tokens=3)).generate(
        inputs["input_ids"], max_new_tokens=10, eos_token_id=[], pixel_values=inputs["pixel_values"])
    assert torch.equal(out.sequences, ref)

    # the feature drafters: trained against this target, saved, reloaded, exact on the suite's methods
    from mmspec.eval.vlm_suite import feature_factories

    for name in ("vlm-eagle", "vlm-msd", "vlm-flash"):
        m = read_json(tmp_path / name / "metrics.json")
        assert m["stage1"]["steps"] > 0 and m["stage2"]["steps"] > 0
        assert all(0.0 <= a <= 1.0 for accs in m["slot_accuracy"].values() for a in accs)
    # the block drafter: trained on the target's answers with their pictures, τ of real decoding recorded
    block = read_json(tmp_path / "vlm-dflash" / "metrics.json")
    assert block["steps"] > 0 and block["train_rows"] > 0 and len(block["heldout_shipped"]["slot_agreement"]) == 31
    assert all(t >= 1.0 for k, t in block["tau_decode"].items() if k != "scenes")
    entry = load("vlm-dflash", home=tmp_path)
    assert entry.model.draft_vocab and block["draft_vocab_ids"] == len(entry.model.draft_vocab)  # its answers' ids
    assert vlm.checksum(entry)["sum"] == pytest.approx(entry.config["checksum"]["sum"], rel=1e-4, abs=1e-3)
    factories = feature_factories(tmp_path)
    # vlm-dflash-c: stage 1's drafter, trained on with compressed pictures; the paper's drafter has no queries
    comp = read_json(tmp_path / "vlm-dflash-c" / "metrics.json")
    assert comp["visual_queries"] == 8 and block["visual_queries"] == 0
    assert set(comp["heldout_after_by_setting"]) == {"1", "2", "4", "8"}
    assert {"chain15-c1", "chain15-c4", "chain15-c8"} <= set(comp["tau_decode"])
    assert comp["steps"] == block["stages"]["1"]["steps"] + comp["stages"]["2"]["steps"]
    assert block["steps"] == block["stages"]["1"]["steps"] + block["stages"]["3"]["steps"] and block["block_size"] == 32
    centry = load("vlm-dflash-c", home=tmp_path)
    assert vlm.checksum(centry)["sum"] == pytest.approx(centry.config["checksum"]["sum"], rel=1e-4, abs=1e-3)
    for method in ("eagle-dynamic", "msd-chain", "msd-dynamic", "flash-1", "dflash", "dflash-tree", "dflash-c1",
                   "dflash-c8"):
        out = SpeculativeGenerator(target.model, factories[method]()).generate(
            inputs["input_ids"], max_new_tokens=10, eos_token_id=[], pixel_values=inputs["pixel_values"])
        assert torch.equal(out.sequences, ref), method

    # FLASH's compression sweep (examples/flash_compression_cost.py --zoo): every setting the drafter has,
    # uncompressed = vlm-msd; fewer compressed tokens, fewer drafter entries; greedy output stays exact
    from mmspec.eval.vlm_suite import compression_sweep, sweep_table

    sweep = compression_sweep(tmp_path, num_prompts=2, max_new_tokens=8, repeats=3, stop_at_eos=False)
    assert [r["compress_to"] for r in sweep["rows"]] == [1, 4, 8, 16, None]
    entries = [r["prompt_entries"] for r in sweep["rows"]]
    assert entries == sorted(entries) and len(set(entries)) == len(entries)
    assert entries[-1] - entries[0] == vlm.num_image_tokens(vlm.MICRO["patch_size"]) - 1
    assert all(r["exact"] and r["forward_ms"] > 0 and r["prefill_ms"] > 0 and r["draft_ms_per_step"] > 0
               and r["tau"] >= 1.0 for r in sweep["rows"])
    assert sweep["rows"][-1]["msd_forward_ms"] > 0 and sweep["target_step_ms"] > 0
    assert len(sweep_table(sweep)) == 4 + len(sweep["rows"])


def test_patch_cells_tile_the_grid():
    assert vlm.patch_cells(vd.CELL).tolist() == list(range(vd.GRID * vd.GRID))  # one patch per cell
    cells = vlm.patch_cells(5)  # the full build: 12 x 12 patches, 4 x 4 per cell
    assert cells.numel() == 144 == vlm.num_image_tokens(5)
    assert torch.bincount(cells).tolist() == [16] * 9
    assert cells.view(12, 12)[0, :4].tolist() == [0] * 4 and cells.view(12, 12)[11, 11] == 8
    with pytest.raises(ValueError, match="patch size"):
        vlm.patch_cells(6)


def _tiny_llava(layers: int, tok):
    cfg = {**vlm.MICRO, "text": {**vlm.MICRO["text"], "num_hidden_layers": layers}}
    return vlm.target_config(cfg, tok)


def test_grown_target_keeps_tower_projector_and_splits_each_layer(tmp_path):
    from transformers import LlavaForConditionalGeneration

    from mmspec.zoo.code_data import ensure_tokenizer

    tok = ensure_tokenizer(tmp_path, micro=True)
    torch.manual_seed(0)
    base = sharpen(LlavaForConditionalGeneration(_tiny_llava(1, tok)))
    proc = vlm.make_processor(tok, vlm.MICRO["patch_size"])
    sc = vd.make_scene(vd.split_seed("val", 1))
    inputs = proc(images=[sc.image()], text=[vd.with_image(sc.questions[0].prompt)], return_tensors="pt")
    # growth to the same depth (ratio 1) must give back the base's function exactly: tower, projector, LM and
    # head are all wired where they belong
    same = vlm.grow_language_model(base, _tiny_llava(1, tok)).eval()
    with torch.no_grad():
        a, b = base(**inputs).logits, same(**inputs).logits
    assert a.std() > 0.1  # not flat (std 0.02 init would be): a wrong wiring would show
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    deep = vlm.grow_language_model(base, _tiny_llava(3, tok)).eval()
    assert deep.config.text_config.num_hidden_layers == 3
    for name, value in base.model.vision_tower.state_dict().items():
        assert torch.equal(deep.model.vision_tower.state_dict()[name], value)
    src = base.model.language_model.layers[0]
    for layer in deep.model.language_model.layers:  # every copy computes: output projections split three ways
        assert torch.equal(layer.self_attn.q_proj.weight, src.self_attn.q_proj.weight)
        torch.testing.assert_close(layer.mlp.down_proj.weight, src.mlp.down_proj.weight / 3)
        torch.testing.assert_close(layer.self_attn.o_proj.weight, src.self_attn.o_proj.weight / 3)


def test_target_build_resumes_from_its_checkpoints_and_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    first = build("vlm", micro=True, home=a, progress=False, only=["vlm-target"])["vlm-target"]
    assert {"vision", "language", "grow"} <= set(first["train"])
    assert first["layers"] == vlm.MICRO["text"]["num_hidden_layers"]
    assert len(first["layer_ablation_loss_increase"]) == first["layers"]
    assert first["train"]["grow"]["tokens_seen"] > 0
    for stage in ("vision", "base", "grow"):
        assert (a / ".build" / "vlm-target" / f"{stage}.pt").is_file()
    rec = read_json(a / "vlm-target" / "zoo.json")["checksum"]
    assert read_json(a / "vlm-target" / "zoo.json")["num_image_tokens"] == vlm.num_image_tokens(vlm.MICRO["patch_size"])
    # a second build in the same home resumes the finished stages (no training steps re-run): same model
    again = build("vlm", micro=True, home=a, progress=False, only=["vlm-target"])["vlm-target"]
    assert again["train"]["grow"]["steps"] == first["train"]["grow"]["steps"]
    assert read_json(a / "vlm-target" / "zoo.json")["checksum"]["sum"] == pytest.approx(rec["sum"], rel=1e-6)
    # and a fresh home trains the same model (fixed step counts, seeded batches)
    build("vlm", micro=True, home=b, progress=False, only=["vlm-target"])
    assert read_json(b / "vlm-target" / "zoo.json")["checksum"]["sum"] == pytest.approx(rec["sum"], rel=1e-4)


def test_drafter_checkpoints_are_keyed_by_the_target():
    from mmspec.zoo.vlm_drafters import target_fingerprint

    x = target_fingerprint({"checksum": {"sum": 1.0, "first": [0.5]}})
    assert x == target_fingerprint({"checksum": {"sum": 1.0, "first": [0.5]}})
    assert x != target_fingerprint({"checksum": {"sum": 1.5, "first": [0.5]}})


# --------------------------------------------------------------------------- feature drafters on a device

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _tiny_target(tmp_path):
    from transformers import LlavaForConditionalGeneration

    from mmspec.zoo.code_data import ensure_tokenizer

    tok = ensure_tokenizer(tmp_path, micro=True)
    torch.manual_seed(0)
    return sharpen(LlavaForConditionalGeneration(_tiny_llava(1, tok))), tok


def test_feature_drafter_training_refuses_a_target_on_another_device(tmp_path):
    from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
    from mmspec.training.feature import train_feature_drafter

    target, _ = _tiny_target(tmp_path)
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, "msd")).to("meta")
    with pytest.raises(ValueError, match="drafter is on meta but the target on cpu"):
        train_feature_drafter(net, target, lambda step, mix: {}, [], progress=False)


@cuda
@pytest.mark.parametrize("method", ["eagle", "msd", "flash"])
def test_feature_drafter_trains_on_cuda_as_on_the_cpu(tmp_path, method):
    """The same CPU-made batches, initial weights and noise draws: a CUDA run follows the CPU run (float32 on
    both; only summation order differs)."""
    import copy
    from dataclasses import replace

    from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
    from mmspec.training.feature import train_feature_drafter
    from mmspec.zoo.vlm_drafters import train_config, zoo_batches

    target, tok = _tiny_target(tmp_path)
    enc = vlm_examples.Encoder(tok, target.config.image_seq_length)
    batches = zoo_batches(enc, vlm_examples.ScenePool("train", 16), 4, seed=1)
    val = [zoo_batches(enc, vlm_examples.ScenePool("val", 4, start=5000), 4, seed=2)(0, 1.0)]
    cfg = replace(train_config(micro=True), stage1_budget_s=600.0, stage2_budget_s=600.0, compress_choices=(1, 2, 4))
    extra = dict(compress_tokens=4, sar_tokens=2) if method == "flash" else {}
    config = FeatureDrafterConfig.for_target(target, method, **extra)
    runs = {}
    for device in ("cpu", "cuda"):
        torch.manual_seed(1)
        net = FeatureDraftModel(config).to(device)
        report = train_feature_drafter(net, copy.deepcopy(target).to(device), batches, val, cfg, progress=False,
                                       checkpoint=tmp_path / device)
        runs[device] = (net, report)
    (cpu_net, cpu), (gpu_net, gpu) = runs["cpu"], runs["cuda"]
    assert next(gpu_net.parameters()).device.type == "cuda"
    for stage in ("stage1", "stage2"):
        assert gpu[stage]["steps"] == cpu[stage]["steps"]
        assert [s for s, _ in gpu[stage]["val_history"]] == [s for s, _ in cpu[stage]["val_history"]]
        assert [v for _, v in gpu[stage]["val_history"]] == pytest.approx([v for _, v in cpu[stage]["val_history"]],
                                                                          rel=1e-3)
    assert set(gpu["slot_accuracy"]) == set(cpu["slot_accuracy"])
    for name, p in cpu_net.state_dict().items():
        torch.testing.assert_close(gpu_net.state_dict()[name].cpu(), p, rtol=1e-3, atol=1e-3)
    # the checkpoints were written from the GPU: a rerun resumes them (no step re-run) on the CPU
    torch.manual_seed(1)
    again = train_feature_drafter(FeatureDraftModel(config), copy.deepcopy(target), batches, val, cfg,
                                  progress=False, checkpoint=tmp_path / "cuda")
    assert again["stage2"]["val_history"] == gpu["stage2"]["val_history"]


@cuda
def test_micro_feature_drafters_build_on_cuda(tmp_path, greedy_reference):
    """``mmspec zoo build --only vlm-eagle,vlm-msd,vlm-flash --device cuda`` against a CPU-built micro target:
    the shipped files are those of a CPU build (same names, dtypes, checksum within float tolerance) and the
    drafters, loaded back on the CPU, decode exactly."""
    import shutil

    from mmspec.eval.vlm_suite import feature_factories

    names = ["vlm-eagle", "vlm-msd", "vlm-flash"]
    a, b = tmp_path / "cpu", tmp_path / "cuda"
    build("vlm", micro=True, home=a, progress=False, only=["vlm-target"])
    b.mkdir()
    for sub in ("vlm-target", "code-tokenizer"):
        shutil.copytree(a / sub, b / sub)
    cpu = build("vlm", micro=True, home=a, progress=False, only=names)
    gpu = build("vlm", micro=True, home=b, progress=False, only=names, device="cuda")
    from safetensors.torch import load_file

    for name in names:
        assert gpu[name]["stage2"]["steps"] == cpu[name]["stage2"]["steps"]
        assert gpu[name]["stage2"]["best_val_loss"] == pytest.approx(cpu[name]["stage2"]["best_val_loss"], rel=1e-3)
        x, y = load_file(str(a / name / "model.safetensors")), load_file(str(b / name / "model.safetensors"))
        assert {k: (v.dtype, v.shape) for k, v in x.items()} == {k: (v.dtype, v.shape) for k, v in y.items()}
        za, zb = read_json(a / name / "zoo.json"), read_json(b / name / "zoo.json")
        assert za["drafter_config"] == zb["drafter_config"]  # the target's signature read on the CPU
        assert zb["checksum"]["sum"] == pytest.approx(za["checksum"]["sum"], rel=1e-2, abs=1e-2)
        entry = load(name, home=b)
        assert vlm.checksum(entry)["sum"] == pytest.approx(zb["checksum"]["sum"], rel=1e-6)

    target = load("vlm-target", home=b)
    scenes = vd.scenes("test", 2)
    inputs = target.tokenizer(images=[sc.image() for sc in scenes],
                              text=[vd.with_image(sc.questions[0].prompt) for sc in scenes], return_tensors="pt")
    ref = greedy_reference(target.model, max_new_tokens=10, **inputs)
    factories = feature_factories(b)
    for method in ("eagle-dynamic", "msd-chain", "flash-1"):
        out = SpeculativeGenerator(target.model, factories[method]()).generate(
            inputs["input_ids"], max_new_tokens=10, eos_token_id=[], pixel_values=inputs["pixel_values"])
        assert torch.equal(out.sequences, ref), method


@cuda
def test_zoo_feature_drafters_decode_exactly_on_cuda(tmp_path, greedy_reference):
    """Not the build: mmspec's decoding loop with the micro target and its feature drafters all on the GPU
    (what a tau measured on the GPU would run)."""
    from mmspec.eval.vlm_suite import DYNAMIC_TREE
    from mmspec.registry import build_drafter

    build("vlm", micro=True, home=tmp_path, progress=False, only=["vlm-target", "vlm-eagle", "vlm-msd", "vlm-flash"])
    target = load("vlm-target", home=tmp_path)
    model = target.model.to("cuda")
    scenes = vd.scenes("test", 2)
    inputs = target.tokenizer(images=[sc.image() for sc in scenes],
                              text=[vd.with_image(sc.questions[0].prompt) for sc in scenes], return_tensors="pt")
    inputs = {k: v.to("cuda") for k, v in inputs.items()}
    ref = greedy_reference(model, max_new_tokens=10, **inputs)
    settings = {"eagle-dynamic": ("eagle", "vlm-eagle", dict(num_tokens=5, tree="dynamic", **DYNAMIC_TREE)),
                "msd-chain": ("msd", "vlm-msd", dict(num_tokens=4, num_nodes=None)),
                "msd-dynamic": ("msd", "vlm-msd", dict(num_tokens=5, tree="dynamic", **DYNAMIC_TREE)),
                "flash-1": ("flash", "vlm-flash", dict(compress_to=1, num_nodes=None))}
    for label, (method, name, kw) in settings.items():
        net = load(name, home=tmp_path).model.to("cuda")
        out = SpeculativeGenerator(model, build_drafter(method, net, target=model, **kw)).generate(
            inputs["input_ids"], max_new_tokens=10, eos_token_id=[], pixel_values=inputs["pixel_values"])
        assert torch.equal(out.sequences, ref), label
