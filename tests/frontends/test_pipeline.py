"""mmspec.pipeline: routing by inspection, default methods per route, exact outputs, and the ValueErrors for
combinations that make no sense. Zoo targets come from the committed zoo (loads in well under a second)."""

import copy

import pytest
import torch

import mmspec
from mmspec.drafters import AutoregressiveDrafter, DEERDrafter, PromptLookupDrafter
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.feature import FeatureDrafter
from mmspec.pipeline import ImagePipeline, JanusPipeline, TextPipeline, VLMPipeline
from mmspec.registry import CHAIN_CONFIDENCE, CONFIDENT_CHAIN_TOKENS
from mmspec.targets import detect_route
from mmspec.tiny import JANUS_BOI, JANUS_BOS, tiny_janus, tiny_model
from mmspec.zoo import load

PROMPT = "def add(a, b):\n"


@pytest.fixture(scope="module")
def code():
    return load("code-target")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tiny_pair):
    """A tiny stock target and drafter saved as local checkpoint directories, and a drafter of a wider vocabulary."""
    root = tmp_path_factory.mktemp("ckpt")
    target, draft = tiny_pair
    target.save_pretrained(root / "target")
    draft.save_pretrained(root / "draft")
    tiny_model("llama", seed=2, vocab_size=256, num_layers=1).save_pretrained(root / "wide")
    return root


def test_routes_by_inspection(code):
    assert detect_route(code.model) == "text"
    assert detect_route(load("vlm-target").model) == "vlm"
    assert detect_route(load("image-target").model) == "image"
    assert detect_route(tiny_janus(0)) == "janus"
    with pytest.raises(ValueError, match="no config"):
        detect_route(torch.nn.Linear(2, 2))


def test_zoo_text_default_is_the_dflash_tree_when_greedy_and_exact(code, greedy_reference):
    """The code target's default (its fastest greedy method): the DFlash DDTree with a prompt-lookup branch, long
    continuations verified alone and the tree cut at 3%; a caller's own lookup_alone or tree_cut is kept, with the
    rest of the tuned tree; a caller's shape (tree_nodes, lookup) replaces the tuned settings."""
    pipe = mmspec.pipeline("zoo:code-target")
    assert isinstance(pipe, TextPipeline) and pipe.method == "dflash" and isinstance(pipe.drafter, DFlashDrafter)
    d = pipe.drafter
    assert (d.tree_nodes, d.top_k, d.lookup, d.lookup_alone, d.tree_cut) == (16, 4, 12, 4, 0.03)
    d = mmspec.pipeline("zoo:code-target", lookup_alone=2).drafter
    assert (d.tree_nodes, d.top_k, d.lookup, d.lookup_alone, d.tree_cut) == (16, 4, 12, 2, 0.03)
    d = mmspec.pipeline("zoo:code-target", tree_cut=0.1).drafter
    assert (d.tree_nodes, d.lookup, d.lookup_alone, d.tree_cut) == (16, 12, 4, 0.1)
    d = mmspec.pipeline("zoo:code-target", tree_nodes=8, lookup=6).drafter
    assert (d.tree_nodes, d.lookup, d.lookup_alone, d.tree_cut) == (8, 6, None, None)
    with pytest.raises(ValueError, match="tree_cut"):
        mmspec.pipeline("zoo:code-target", tree_cut=1.5)
    deer = mmspec.pipeline("zoo:code-target", method="deer")  # the aligned diffusion drafter by name
    assert isinstance(deer.drafter, DEERDrafter)
    ids = code.tokenizer(PROMPT, return_tensors="pt", add_special_tokens=False).input_ids
    ref = greedy_reference(code.model, ids, 24)
    for p in (pipe, deer):
        out = p(PROMPT, max_new_tokens=24, stop_at_eos=False)
        assert torch.equal(out.sequences, ref)
        assert out.stats.new_tokens == 24 and out.stats.mean_accepted_tokens > 1.0
        assert out.texts[0] == code.tokenizer.decode(ref[0, ids.shape[1]:], skip_special_tokens=True)


def test_zoo_text_default_samples_with_the_eagle_chain():
    """A sampling call of the default pipeline runs the code target's fastest sampling method, the EAGLE-style feature
    drafter's chain (code-eagle): the same draws as a pipeline built for it, with the same seed."""
    pipe = mmspec.pipeline("zoo:code-target")
    assert pipe.sampling_method == "eagle"
    out = pipe(PROMPT, max_new_tokens=16, do_sample=True, seed=3, stop_at_eos=False)
    assert out.config["method"] == "eagle"
    eagle = mmspec.pipeline("zoo:code-target", method="eagle")
    assert eagle.sampling_method is None and isinstance(eagle.drafter, FeatureDrafter)
    again = eagle(PROMPT, max_new_tokens=16, do_sample=True, seed=3, stop_at_eos=False)
    assert torch.equal(out.sequences, again.sequences)
    chain = mmspec.pipeline("zoo:code-target", method="chain")
    assert chain.sampling_method is None and isinstance(chain.drafter, AutoregressiveDrafter)
    assert chain.drafter.confidence == CHAIN_CONFIDENCE and chain.drafter.num_tokens == CONFIDENT_CHAIN_TOKENS
    assert pipe(PROMPT, max_new_tokens=4, do_sample=True, seed=3, method="dflash").config["method"] == "dflash"


def test_zoo_dflash_settings_unless_the_caller_shapes_the_drafts():
    """method='dflash' on the code target gets the zoo's tuned DDTree + lookup; a caller's shape option replaces
    them (and a named method or a shape option leaves sampling calls on the pipeline's method)."""
    named = mmspec.pipeline("zoo:code-target", method="dflash")
    assert (named.drafter.tree_nodes, named.drafter.lookup, named.drafter.lookup_alone) == (16, 12, 4)
    assert named.sampling_method is None
    chain = mmspec.pipeline("zoo:code-target", method="dflash", num_tokens=5)
    assert chain.drafter.tree_nodes is None and chain.drafter.num_tokens == 5 and chain.drafter.lookup is None
    small = mmspec.pipeline("zoo:code-target", tree_nodes=8)
    assert (small.drafter.tree_nodes, small.drafter.lookup) == (8, None) and small.sampling_method is None
    assert mmspec.pipeline("zoo:code-target", adaptive=True).sampling_method == "eagle"


@pytest.mark.parametrize("method,drafter_type", [("chain", AutoregressiveDrafter), ("tree", AutoregressiveDrafter),
                                                 ("prompt-lookup", PromptLookupDrafter), ("plain", type(None))])
def test_text_methods_agree_with_plain(method, drafter_type):
    pipe = mmspec.pipeline("zoo:code-target", method=method)
    assert isinstance(pipe.drafter, drafter_type)
    prompts = [PROMPT, "import os\n\n\ndef main():\n"]
    plain = mmspec.pipeline("zoo:code-target", method="plain")(prompts, max_new_tokens=12)
    assert pipe(prompts, max_new_tokens=12).texts == plain.texts
    ids = pipe.tokenizer(PROMPT, return_tensors="pt", add_special_tokens=False).input_ids
    assert pipe(ids, max_new_tokens=12).texts == plain.texts[:1]  # token ids may be given positionally too


def test_zoo_diffuspec_gets_the_zoo_tuning_unless_given():
    from mmspec.drafters.diffuspec import ADLConfig, DiffuSpecDrafter
    from mmspec.registry import CHAIN_CONFIDENCE, CPS_LAMBDA, ZOO_ADL
    pipe = mmspec.pipeline("zoo:code-target", method="diffuspec")
    assert isinstance(pipe.drafter, DiffuSpecDrafter) and pipe.drafter.cps.causal is not None  # code-ngram proxy
    assert pipe.drafter.adl == ZOO_ADL and pipe.drafter.cps.cfg.lam == CPS_LAMBDA
    assert pipe.drafter.confidence == CHAIN_CONFIDENCE  # the route's cut, which moves ADL on code
    mine = ADLConfig(k_min=3, k_max=5, delta=0)
    assert mmspec.pipeline("zoo:code-target", method="diffuspec", adl_config=mine).drafter.adl == mine
    plain = mmspec.pipeline("zoo:code-target", method="plain")(PROMPT, max_new_tokens=12)
    assert pipe(PROMPT, max_new_tokens=12).texts == plain.texts


def test_checkpoint_dirs_with_device_map(checkpoints, greedy_reference):
    pipe = mmspec.pipeline(str(checkpoints / "target"), drafter=str(checkpoints / "draft"), device_map="auto",
                           drafter_device="cpu")
    assert pipe.method == "chain" and pipe.target.name.endswith("target")
    ids = torch.randint(3, 96, (2, 10), generator=torch.Generator().manual_seed(0))
    out = pipe.generate(input_ids=ids, max_new_tokens=12, stop_at_eos=False)
    ref = greedy_reference(pipe.model, ids, 12)
    assert torch.equal(out.sequences, ref)
    # no tokenizer next to these weights: text prompts are refused with the way out
    with pytest.raises(ValueError, match="no tokenizer"):
        pipe("hello")


def test_vlm_default_is_dflash_and_matches_plain():
    from mmspec.zoo import vlm_data as vd

    pipe = mmspec.pipeline("zoo:vlm-target")
    assert isinstance(pipe, VLMPipeline) and pipe.method == "dflash"
    scenes = vd.scenes("test", 2)
    kw = dict(images=[s.image() for s in scenes], prompts=[vd.with_image("Caption:")] * 2, max_new_tokens=24)
    out = pipe.generate(**kw)
    assert out.texts == mmspec.pipeline("zoo:vlm-target", method="plain").generate(**kw).texts
    assert out.stats.mean_accepted_tokens > 1.0
    assert mmspec.pipeline("zoo:vlm-target", method="chain").method == "chain"
    tree = mmspec.pipeline("zoo:vlm-target", tree_nodes=8)  # the block drafter's DDTree, exact too
    assert tree.generate(**kw).texts == out.texts


def test_image_route_greedy_spec_equals_ar_and_overrides():
    pipe = mmspec.pipeline("zoo:image-target", method="spec", tree="chain")
    assert isinstance(pipe, ImagePipeline) and pipe.layout.num_classes == len(pipe.classes)
    spec = pipe.generate([0, 4], temperature=0)
    ar = pipe.generate([0, 4], temperature=0, method="ar")  # per-call override
    assert torch.equal(spec.codes, ar.codes) and spec.images.shape[0] == 2
    assert mmspec.pipeline("zoo:image-target").method == "lantern++"
    # a model object (not the zoo spec): plain AR needs only the VQ decoder, the other methods a drafter
    entry = load("image-target")
    plain = mmspec.pipeline(entry.model, method="ar", vq=entry.extras["vq"])
    assert torch.equal(plain.generate([0, 4], temperature=0).codes, ar.codes)
    with pytest.raises(ValueError, match="needs drafter="):
        mmspec.pipeline(entry.model, method="spec", vq=entry.extras["vq"])


def test_janus_route():
    pipe = mmspec.pipeline(tiny_janus(0), drafter=tiny_janus(1, num_layers=1), method="spec")
    assert isinstance(pipe, JanusPipeline)
    prompt = torch.tensor([[JANUS_BOS, 17, 99, 42, 8, JANUS_BOI]])
    out = pipe.generate(prompt, decode=False)
    assert torch.equal(out.codes, pipe.generate(prompt, method="ar", decode=False).codes)
    with pytest.raises(ValueError, match="prompt ids"):
        pipe.generate(class_ids=[0])


def test_nonsensical_combinations_are_clear_errors(checkpoints):
    with pytest.raises(ValueError, match="method for image / janus targets"):
        mmspec.pipeline("zoo:code-target", method="lantern")
    with pytest.raises(ValueError, match="method for text targets"):
        mmspec.pipeline("zoo:image-target", method="chain")
    with pytest.raises(ValueError, match="text-only target"):
        mmspec.pipeline("zoo:code-target", method="prompt-lookup")(PROMPT, images=[object()])
    with pytest.raises(ValueError, match="class ids"):
        mmspec.pipeline("zoo:image-target").generate(prompts=["a red circle"])
    with pytest.raises(ValueError, match="vocabulary"):
        mmspec.pipeline(str(checkpoints / "target"), drafter=str(checkpoints / "wide"))
    with pytest.raises(ValueError, match="diffusion LM"):
        mmspec.pipeline(str(checkpoints / "target"), drafter=str(checkpoints / "draft"), method="deer")
    with pytest.raises(ValueError, match="takes no drafter"):
        mmspec.pipeline(str(checkpoints / "target"), drafter=str(checkpoints / "draft"), method="prompt-lookup")
    with pytest.raises(ValueError, match="unknown options"):
        mmspec.pipeline("zoo:code-target", cfg_scale=3.0)
    with pytest.raises(ValueError, match="neither"):
        mmspec.pipeline("no/such/dir")


def test_feature_drafter_of_another_target_is_refused():
    msd = load("vlm-msd").model
    with pytest.raises(ValueError, match="another target"):
        mmspec.pipeline("zoo:code-target", drafter=msd)
    other = copy.deepcopy(msd)
    other.config.target = dict(other.config.target, lm_head_mean=other.config.target["lm_head_mean"] + 1.0)
    with pytest.raises(ValueError, match="another target"):
        mmspec.pipeline("zoo:vlm-target", drafter=other)
    with pytest.raises(ValueError, match="trained as 'msd'"):
        mmspec.pipeline("zoo:vlm-target", drafter=msd, method="flash")
