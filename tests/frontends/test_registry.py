"""mmspec.registry: every (route, method) builds the drafter and loop it names, with its settings written once;
one name per method across the pipeline, bench and the eval suites."""

import pytest
import torch

from mmspec import DEFAULT_TREE, SpeculativeGenerator, TreeTemplate
from mmspec import registry as reg
from mmspec.drafters import (AutoregressiveDrafter, DEERDrafter, DiffusionLM, FeatureDrafter, NoDrafter,
                             PromptLookupDrafter)
from mmspec.drafters.diffuspec import DiffuSpecDrafter
from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
from mmspec.guidance import DEFAULT_CFG_SCALE, CFGModel


def _feature_net(target, method):
    torch.manual_seed(0)
    kw = dict(compress_tokens=2, sar_tokens=2) if method == "flash" else {}
    return FeatureDraftModel(FeatureDrafterConfig.for_target(target, method, **kw))


@pytest.mark.parametrize("method,cls,shape", [
    ("chain", AutoregressiveDrafter, dict(tree=None, num_tokens=reg.DRAFT_TOKENS["chain"])),
    ("tree", AutoregressiveDrafter, dict(tree=DEFAULT_TREE)),
    ("dynamic", AutoregressiveDrafter, dict(tree="dynamic", top_k=4, num_nodes=16)),
    ("prompt-lookup", PromptLookupDrafter, dict(num_tokens=reg.DRAFT_TOKENS["prompt-lookup"])),
    ("mmspec-plain", NoDrafter, {}),
])
def test_causal_and_model_free_methods(tiny_pair, method, cls, shape):
    target, draft = tiny_pair
    for route in ("text", "vlm"):
        assert method in reg.METHODS[route]
    drafter = reg.build_drafter(method, draft if method in reg.CAUSAL_METHODS else None)
    assert type(drafter) is cls
    for name, value in shape.items():
        assert getattr(drafter, name) == value, name
    assert isinstance(reg.engine(target, drafter), SpeculativeGenerator)
    assert reg.build_drafter("plain") is None and reg.engine(target, None) is None


def test_diffusion_methods(tiny_pair):
    _, draft = tiny_pair
    dlm = DiffusionLM(draft, 2)
    deer = reg.build_drafter("deer", dlm)
    assert type(deer) is DEERDrafter and deer.num_tokens == reg.DRAFT_TOKENS["deer"]
    tuned = reg.zoo_diffuspec(None)
    assert tuned["cps_config"].lam == reg.CPS_LAMBDA and tuned["adl_config"] == reg.ZOO_ADL
    assert type(reg.build_drafter("diffuspec", dlm, num_tokens=6, lattice=True, **tuned)) is DiffuSpecDrafter


@pytest.mark.parametrize("method", reg.FEATURE_METHODS)
def test_feature_methods(tiny_pair, method):
    target, _ = tiny_pair
    net = _feature_net(target, method)
    drafter = reg.build_drafter(method, net, target=target, num_nodes=None)
    assert type(drafter) is FeatureDrafter and method in reg.VLM_METHODS
    assert (method in reg.TEXT_METHODS) == (method == "eagle")  # EAGLE drafts for text targets too
    other = next(m for m in reg.FEATURE_METHODS if m != method)
    with pytest.raises(ValueError, match=f"trained as '{method}'"):
        reg.build_drafter(other, net, target=target)


def test_a_method_refuses_the_wrong_drafter(tiny_pair):
    target, draft = tiny_pair
    with pytest.raises(ValueError, match="needs a small causal LM drafter"):
        reg.build_drafter("chain", None)
    with pytest.raises(ValueError, match="needs a diffusion LM drafter"):
        reg.build_drafter("deer", draft)
    with pytest.raises(ValueError, match="needs a feature drafter"):
        reg.build_drafter("msd", draft, target=target)
    with pytest.raises(ValueError, match="that is method 'tree'"):
        reg.build_drafter("chain", draft, tree=TreeTemplate.full((2, 1)))
    with pytest.raises(ValueError, match="unknown method"):
        reg.build_drafter("medusa", draft)
    assert [reg.causal_method(t) for t in (None, "dynamic", DEFAULT_TREE)] == ["chain", "dynamic", "tree"]


def test_image_drafters_and_bounds(tiny_pair):
    target, draft = tiny_pair
    guided = CFGModel(draft, 3.0, 5)
    chain = reg.image_drafter(guided, tree="chain", num_tokens=3)
    assert type(chain) is AutoregressiveDrafter and chain.tree is None and chain.num_tokens == 3 and not chain.adaptive
    assert reg.image_drafter(guided).tree is reg.LANTERN_TREE  # "static" by default
    assert reg.image_drafter(guided, tree="dynamic").tree == "dynamic"
    sar = _feature_net(target, "flash")
    lattice = reg.image_drafter(net=sar, guided_target=target, tree="static")
    assert type(lattice) is FeatureDrafter and lattice.tree.depth == 2
    assert reg.resolve_bound("lantern", None, None) == {"delta": 0.1, "lantern_k": 8}
    assert reg.resolve_bound("lantern++", None, None) == {"lam": 10.0, "lantern_k": 16}  # chosen on the zoo
    assert reg.resolve_bound("lantern++", None, 2.0, 4) == {"lam": 2.0, "lantern_k": 4}
    assert reg.resolve_bound("spec", None, None) == {}
    with pytest.raises(ValueError, match="delta"):
        reg.resolve_bound("spec", 0.1, None)
    with pytest.raises(ValueError, match="lantern_k .*does not apply to method 'spec'"):
        reg.resolve_bound("spec", None, None, 8)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="lantern_k must be an int >= 1"):
            reg.resolve_bound("lantern", None, None, bad)
    with pytest.raises(ValueError, match="tree must be"):
        reg.image_drafter(guided, tree="bushy")


def test_one_name_per_method():
    from mmspec.eval.bench import ALL_METHODS
    from mmspec.eval.code_suite import CODE_METHODS
    from mmspec.eval.vlm_suite import VLM_METHODS as VLM_SUITE

    peers = {"hf-assisted", "hf-prompt-lookup"}  # Hugging Face's own generate, not mmspec methods
    assert set(ALL_METHODS) - peers <= set(reg.TEXT_METHODS)
    known = set(reg.TEXT_METHODS) | set(reg.VLM_METHODS)

    def method_of(name):  # a report names a method, or a method and one of its settings: "<method>-<setting>"
        parts = name.split("-")
        return next(("-".join(parts[:i]) for i in range(len(parts), 0, -1) if "-".join(parts[:i]) in known), None)

    for name in set(CODE_METHODS + VLM_SUITE) - peers:
        assert method_of(name) is not None, name
    retired = {"mmspec-chain", "mmspec-tree", "mmspec-dynamic", "mmspec-prompt-lookup", "text-chain", "text-tree",
               "text"}
    for names in (ALL_METHODS, CODE_METHODS, VLM_SUITE, *reg.METHODS.values()):
        assert not retired & set(names)


def test_route_options_are_checked():
    assert reg.take_options({"num_tokens": 3}, "text")["num_tokens"] == 3
    assert reg.take_options({}, "image")["cfg_scale"] == reg.take_options({}, "janus")["cfg_scale"] == \
        DEFAULT_CFG_SCALE
    with pytest.raises(ValueError, match="unknown options for the text route"):
        reg.take_options({"cfg_scale": 2.0}, "text")
