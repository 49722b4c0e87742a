"""Image family of the zoo: procedural data, and a MICRO build (VQ, AR target, drafter, classifier) that
must load back, reproduce its recorded checksums, round-trip codes and sample with CFG."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import math  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from mmspec import image_codes  # noqa: E402
from mmspec.zoo import ZooEntry, image, image_data  # noqa: E402
from mmspec.zoo import image_loader  # noqa: E402
from mmspec.zoo.common import logits_checksum  # noqa: E402
from mmspec.zoo.home import read_json  # noqa: E402

# ---------------------------------------------------------------------------------------------------- data


def test_data_is_deterministic():
    a, la = image_data.make_dataset("train", 24)
    b, lb = image_data.make_dataset("train", 24)
    assert torch.equal(a, b) and torch.equal(la, lb)
    assert a.shape == (24, 3, image_data.IMAGE_SIZE, image_data.IMAGE_SIZE)
    assert a.min() >= -1 and a.max() <= 1
    # the same seed redrawn alone gives identical pixels
    seed = image_data.split_seeds("val", 1, start=5)[0]
    img1, c1 = image_data.example(seed)
    img2, c2 = image_data.example(seed)
    assert c1 == c2 and img1.tobytes() == img2.tobytes()


def test_classes_balanced_and_jittered():
    assert image_data.NUM_CLASSES >= 10 and len(set(image_data.CLASSES)) == image_data.NUM_CLASSES
    x, y = image_data.make_dataset("train", 4 * image_data.NUM_CLASSES)
    assert torch.equal(torch.bincount(y), torch.full((image_data.NUM_CLASSES,), 4))
    # two pictures of one class differ (position/size/colour jitter)
    same = (y == 0).nonzero().flatten()
    assert not torch.equal(x[same[0]], x[same[1]])


def test_splits_are_disjoint():
    ranges = [set(image_data.split_seeds(s, 2000)) for s in ("train", "val", "test")]
    assert not (ranges[0] & ranges[1]) and not (ranges[0] & ranges[2]) and not (ranges[1] & ranges[2])
    lo = {s: image_data.SPLITS[s] for s in image_data.SPLITS}
    spans = sorted(lo.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    for s in ("train", "val", "test"):
        assert image_data.split_of_seed(image_data.split_seeds(s, 1, start=7)[0]) == s
    with pytest.raises(ValueError):
        image_data.split_seeds("val", image_data.SPLITS["val"][1] - image_data.SPLITS["val"][0] + 1)
    val, _ = image_data.make_dataset("val", 4)
    test, _ = image_data.make_dataset("test", 4)
    assert not torch.equal(val, test)


def test_token_layout():
    lay = image_codes.TokenLayout(codebook_size=256, num_classes=12, grid=8)
    assert lay.class_offset == 256 and lay.null_id == 268 and lay.vocab_size == 269 and lay.seq_len == 65
    assert lay.class_tokens([0, 11, -1]).tolist() == [256, 267, 268]
    assert image_codes.TokenLayout.from_dict(lay.to_dict()) == lay
    with pytest.raises(ValueError):
        lay.class_tokens([12])


def test_cfg_formula():
    cond, uncond = torch.tensor([[1.0, 3.0]]), torch.tensor([[2.0, 1.0]])
    assert torch.equal(image_codes.cfg_logits(cond, uncond, 1.0), cond)
    assert torch.equal(image_codes.cfg_logits(cond, uncond, 3.0), torch.tensor([[-1.0, 7.0]]))


# --------------------------------------------------------------------------------------------- micro build


@pytest.fixture(scope="module")
def micro_zoo(tmp_path_factory):
    home = tmp_path_factory.mktemp("zoo")
    metrics = image.build(home, micro=True, progress=False)
    return home, metrics


def _close(a: dict, b: dict, rel: float = 1e-4) -> bool:
    def ok(x, y):
        return math.isclose(x, y, rel_tol=rel, abs_tol=rel * 10)
    return (ok(a["sum"], b["sum"]) and ok(a["abs_sum"], b["abs_sum"])
            and all(ok(x, y) for x, y in zip(a["first"], b["first"])))


def test_micro_build_writes_everything(micro_zoo):
    home, metrics = micro_zoo
    assert set(metrics) == set(image.NAMES)
    for name in image.NAMES:
        folder = home / name
        zoo = read_json(folder / "zoo.json")
        assert zoo["family"] == "image" and zoo["name"] == name and zoo["micro"] is True
        for key in ("seed", "python", "torch", "transformers", "diffusers", "checksum"):
            assert key in zoo
        m = read_json(folder / "metrics.json")
        assert m["train_steps"] == metrics[name]["train_steps"] and m["weights_mb"] > 0
        for key in ("train_steps", "train_seconds", "stopped"):
            assert key in m
        assert list(folder.glob("*.safetensors")) or list(folder.glob("*/*.safetensors"))
    assert "psnr_test_db" in metrics["image-vq"]
    assert 0.0 <= metrics["image-classifier"]["accuracy_test"] <= 1.0
    for name in ("image-target", "image-drafter"):
        assert 0.0 <= metrics[name]["class_fidelity"] <= 1.0
        assert metrics[name]["test_loss"] > 0
        assert (home / name / "samples.png").exists()
    for name, slots in (("image-eagle", 1), ("image-sar", 4)):  # feature drafters of the guided target
        acc = metrics[name]["slot_accuracy"]["None"]
        assert metrics[name]["cfg_scale"] == 3.0 and len(acc) == slots and all(0.0 <= a <= 1.0 for a in acc)
    block = metrics["image-dflash"]  # the block drafter: held-out slots and τ of real decoding recorded
    assert block["cfg_scale"] == 3.0 and len(block["heldout_shipped"]["slot_agreement"]) == block["block_size"] - 1
    assert all(block["tau_decode"][k] >= 1.0 for k in ("spec_chain", "spec_ddtree", "lantern++_chain"))


def test_micro_feature_drafter_is_exact_in_the_image_generator(micro_zoo):
    """The zoo's image feature drafter, on its guided target: greedy LANTERN at δ = 0 and lossless speculative
    decoding give plain guided AR's codes."""
    from mmspec.image_gen import ImageGenerator

    home, _ = micro_zoo
    gen = ImageGenerator.from_zoo(home)
    assert gen.feature_drafters["feature"].config.guidance_scale == 3.0
    assert gen.feature_drafters["sar"].config.sar_tokens == 4
    ref = gen.generate([0, 3], method="ar", temperature=0, seed=0).codes
    for drafter, method, tree, kw in (("feature", "spec", "chain", {}), ("feature", "lantern", "static", dict(delta=0.0)),
                                      ("feature", "spec", "dynamic", {}), ("sar", "spec", "chain", {}),
                                      ("sar", "lantern++", "static", dict(lam=1.0)), ("dflash", "spec", "chain", {}),
                                      ("dflash", "spec", "ddtree", {}), ("dflash", "lantern++", "chain", dict(lam=1.0))):
        out = gen.generate([0, 3], method=method, tree=tree, drafter=drafter, temperature=0, seed=0, **kw)
        assert torch.equal(out.codes, ref)


@pytest.mark.parametrize("name", image.NAMES)
def test_load_reproduces_checksum(micro_zoo, name):
    home, _ = micro_zoo
    entry = image_loader.load(name, home / name)
    assert isinstance(entry, ZooEntry) and entry.name == name
    assert not entry.model.training
    layout = entry.extras.get("layout")
    out = image.checksum_output(name, entry.model, layout)
    assert torch.isfinite(out).all()
    assert _close(entry.config["checksum"], logits_checksum(out))


def test_load_via_registry(micro_zoo):
    from mmspec import zoo

    home, _ = micro_zoo
    if "image-target" not in zoo.available():  # __init__ imports every family; another family may be unfinished
        pytest.skip("registry does not list the image family")
    entry = zoo.load("image-target", home)
    assert entry.extras["vq"] is not None


def test_encode_decode_round_trip(micro_zoo):
    home, _ = micro_zoo
    vq = image_loader.load("image-vq", home / "image-vq").model
    lay = image_loader.load("image-target", home / "image-target").extras["layout"]
    x, _ = image_data.make_dataset("test", 3, size=image.image_size_of(vq))
    codes = image.encode_images(vq, x)
    assert codes.shape == (3, lay.num_codes) and codes.dtype == torch.long
    assert codes.min() >= 0 and codes.max() < lay.codebook_size
    y = image_codes.decode_codes(vq, codes)
    assert y.shape == x.shape and y.min() >= -1 and y.max() <= 1
    # re-encoding a decode is stable in shape, and PIL input works too
    pil = [image_data.tensor_to_pil(t) for t in x]
    assert torch.equal(image.encode_images(vq, pil), image.encode_images(vq, torch.stack(
        [image_data.pil_to_tensor(p) for p in pil])))
    # decode_codes agrees with the VQ model's own quantised forward pass
    assert torch.allclose(y, vq(x).sample.clamp(-1, 1), atol=1e-5)


def test_generate_images_with_cfg(micro_zoo):
    home, _ = micro_zoo
    entry = image_loader.load("image-target", home / "image-target")
    target, vq, lay = entry.model, entry.extras["vq"], entry.extras["layout"]
    assert image_codes.layout_of(target) == lay
    gen = torch.Generator().manual_seed(0)
    imgs, codes = image.generate_images(target, vq, [0, 3, -1], cfg_scale=3.0, temperature=1.0, top_k=20,
                                        generator=gen, return_codes=True)
    size = image.image_size_of(vq)
    assert size == image.MICRO.image_size and lay.grid == size // 4  # the VQ downsamples 4x
    assert imgs.shape == (3, 3, size, size)
    assert codes.shape == (3, lay.num_codes) and codes.max() < lay.codebook_size
    # same generator seed -> same samples; greedy is deterministic
    again = image_codes.generate_codes(target, [0, 3, -1], 3.0, 1.0, 20, torch.Generator().manual_seed(0))
    assert torch.equal(codes, again)
    g1 = image_codes.generate_codes(target, [1, 2], cfg_scale=2.0, temperature=0.0)
    g2 = image_codes.generate_codes(target, [1, 2], cfg_scale=2.0, temperature=0.0)
    assert torch.equal(g1, g2)


def test_generate_cfg_matches_full_forward(micro_zoo):
    """The cached, batched CFG loop picks the same greedy tokens as full recomputation with guidance."""
    home, _ = micro_zoo
    entry = image_loader.load("image-drafter", home / "image-drafter")
    model, lay = entry.model, entry.extras["layout"]
    codes = image_codes.generate_codes(model, [4], cfg_scale=2.5, temperature=0.0)
    seq_c = torch.cat([lay.class_tokens([4]), lay.codes_to_tokens(codes[0])])
    seq_u = torch.cat([lay.class_tokens([-1]), lay.codes_to_tokens(codes[0])])
    with torch.no_grad():
        logits = model(input_ids=torch.stack([seq_c, seq_u])).logits[:, :-1]
    guided = image_codes.cfg_logits(image_codes.restrict_to_codes(logits[0], lay), image_codes.restrict_to_codes(logits[1], lay), 2.5)
    assert torch.equal(guided.argmax(-1), codes[0])


def test_train_image_drafter_cli(micro_zoo, tmp_path, monkeypatch):
    """`mmspec train image-drafter` on the (micro) zoo target writes a loadable drafter for that target."""
    from mmspec.cli import main
    from mmspec.drafters.feature_model import FeatureDraftModel

    home, _ = micro_zoo
    monkeypatch.setenv("MMSPEC_HOME", str(home))
    out = tmp_path / "drafter"
    assert main(["train", "image-drafter", "--samples", "16", "--steps", "3", "--budget-s", "5", "--batch-size", "4",
                 "--sar-tokens", "2", "--out", str(out)]) == 0
    target = image_loader.load("image-target", home / "image-target").model
    net = FeatureDraftModel.from_pretrained(out, target=target)
    assert net.config.sar_tokens == 2 and net.config.guidance_scale == 3.0
    assert (out / "train_report.json").exists()


# ------------------------------------------------------------------------- staged, resumable target build


def test_micro_target_is_grown_in_stages(micro_zoo):
    """The target trains as a shallow base, then grown to full depth; metrics record both stages' steps,
    tokens and seconds and each layer's ablation (every layer of the grown model is used)."""
    home, metrics = micro_zoo
    m = metrics["image-target"]
    plan = image.MICRO
    assert m["layers"] == plan.ar_layers and plan.ar_layers % plan.ar_base_layers == 0
    assert set(m["stages"]) == {"base", "grow"}
    assert m["stages"]["base"]["steps"] == plan.ar_base_steps and m["stages"]["grow"]["steps"] == plan.ar_steps
    lay = image_loader.load("image-target", home / "image-target").extras["layout"]
    assert m["train_tokens"] == (plan.ar_base_steps + plan.ar_steps) * plan.ar_batch * lay.num_codes
    assert len(m["layer_ablation_loss_increase"]) == plan.ar_layers
    for stage in ("base", "grow"):
        assert (image.stage_dir(home, "image-target") / f"{stage}.pt").exists()


def test_only_target_resumes_from_its_checkpoints(micro_zoo, tmp_path):
    """`zoo build --only image-target` on a home holding its inputs resumes from the stage checkpoints: the
    finished stages are not trained again, and the shipped target is the same."""
    import shutil

    home, metrics = micro_zoo
    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    shutil.rmtree(copy / "image-target")
    again = image.build(copy, micro=True, progress=False, names=["image-target"])
    assert set(again) == {"image-target"}
    before, after = metrics["image-target"], again["image-target"]
    for stage in ("base", "grow"):  # no new training time: both stages were read back finished
        assert abs(after["stages"][stage]["seconds"] - before["stages"][stage]["seconds"]) < 0.5
        assert after["stages"][stage]["steps"] == before["stages"][stage]["steps"]
    assert read_json(copy / "image-target" / "zoo.json")["checksum"] == read_json(home / "image-target" / "zoo.json")["checksum"]


def test_checkpoints_of_another_vq_are_cleared(tmp_path):
    folder = image.stage_dir(tmp_path, "image-target")
    image._bind_checkpoints(tmp_path, ["image-target"], {"sum": 1.0}, progress=False)
    (folder / "base.pt").write_bytes(b"x")
    image._bind_checkpoints(tmp_path, ["image-target"], {"sum": 1.0}, progress=False)
    assert (folder / "base.pt").exists()  # same VQ: kept
    image._bind_checkpoints(tmp_path, ["image-target"], {"sum": 2.0}, progress=False)
    assert not (folder / "base.pt").exists() and (folder / "inputs.json").exists()


def test_building_a_model_without_its_inputs_names_them(tmp_path):
    with pytest.raises(ValueError, match="image-vq"):
        image.build(tmp_path, micro=True, progress=False, names=["image-target"])
    with pytest.raises(ValueError, match="image-target"):
        image.build(tmp_path, micro=True, progress=False, names=["image-sar"])


def test_feature_drafters_ship_in_fp16(micro_zoo):
    from safetensors.torch import load_file

    home, _ = micro_zoo
    for name in ("image-eagle", "image-sar"):
        tensors = load_file(str(home / name / "model.safetensors"))
        assert tensors and all(t.dtype == torch.float16 for t in tensors.values())


def test_precomputed_training_features_are_the_guided_targets(micro_zoo):
    """Feature drafters train on the guided target's features computed once per sequence: a batch carries the
    features the target's own forward gives its rows, and the step's loss on them is the loss on a fresh forward."""
    from mmspec.guidance import CFGModel
    from mmspec.training.feature import FeatureTrainConfig, batch_features, feature_loss, target_features
    from mmspec.training.image_feature import guided_features, sequence_batches, target_samples
    from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel

    home, _ = micro_zoo
    entry = image_loader.load("image-target", home / "image-target")
    target, layout = entry.model, entry.extras["layout"]
    codes = torch.arange(layout.code_offset, layout.code_offset + layout.codebook_size)
    guided = CFGModel(target, 3.0, layout.null_id, codes)
    seqs = target_samples(target, layout, 6, 3.0, seed=0, batch_size=6, progress=False)
    feats = guided_features(guided, seqs, batch_size=4, progress=False)
    assert feats.shape[:2] == seqs.shape
    batch = sequence_batches(seqs, 3, seed=0, features=feats)(5)
    plain = {k: v for k, v in batch.items() if k != "features"}
    fresh = target_features(guided, plain)[0]
    torch.testing.assert_close(batch_features(guided, batch)[0], fresh, rtol=1e-5, atol=1e-5)
    torch.manual_seed(0)
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(guided, "eagle", sar_tokens=2, guidance_scale=3.0)).eval()
    cfg = FeatureTrainConfig(feature_noise=0.0)
    embed, head = guided.get_input_embeddings(), guided.get_output_embeddings()
    cached = feature_loss(net, embed, head, batch, batch["features"], None, None, cfg)
    torch.testing.assert_close(cached, feature_loss(net, embed, head, plain, fresh, None, None, cfg), rtol=1e-5, atol=1e-6)


def test_target_samples_resume_after_a_kill(micro_zoo, tmp_path, monkeypatch):
    """Sampling the drafters' training data saves each finished batch with the generator's state: a run killed
    after the first batch goes on from there and ends with exactly the uninterrupted run's samples."""
    from mmspec.training import image_feature

    home, _ = micro_zoo
    entry = image_loader.load("image-target", home / "image-target")
    target, layout = entry.model, entry.extras["layout"]
    whole = image_feature.target_samples(target, layout, 6, 3.0, seed=4, batch_size=2, progress=False)
    partial = tmp_path / "samples.partial.pt"
    real, calls = image_feature.generate_codes, []

    def dies_on_second_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(image_feature, "generate_codes", dies_on_second_batch)
    with pytest.raises(KeyboardInterrupt):
        image_feature.target_samples(target, layout, 6, 3.0, seed=4, batch_size=2, progress=False, partial=partial)
    monkeypatch.setattr(image_feature, "generate_codes", real)
    assert partial.exists()
    calls.clear()
    monkeypatch.setattr(image_feature, "generate_codes", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    resumed = image_feature.target_samples(target, layout, 6, 3.0, seed=4, batch_size=2, progress=False,
                                           partial=partial)
    assert len(calls) == 2 and torch.equal(resumed, whole)
