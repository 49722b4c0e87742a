"""Training checkpoints: a build killed part-way resumes where it stopped and ends exactly where an
uninterrupted build ends; depth growth preserves the base model's function."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mmspec.training.loop import train_loop
from mmspec.zoo.growth import drop_layers, grow_depth, layer_ablation, prune_unused, unused_layers
from mmspec.zoo.streams import batches, mean_loss
from tests.tiny_models import sharpen


def _tiny(layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False))


def _run(model, ckpt, fail_at=None):
    data = torch.randint(0, 64, (2000,), generator=torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(5)
    stream = batches(data, 4, 16, gen)
    val = data[:17].unsqueeze(0)

    def next_batch(step):
        if fail_at is not None and step == fail_at:
            raise KeyboardInterrupt("killed")
        return next(stream)

    def loss_fn(m, b):
        logits = m(input_ids=b[:, :-1]).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 64), b[:, 1:].reshape(-1))

    return train_loop(model, next_batch, lambda: float(loss_fn(model, val)), loss_fn, max_steps=20, budget_s=600,
                      lr=1e-2, warmup=2, eval_every=5, patience=10, progress=False, checkpoint=ckpt,
                      checkpoint_every_s=0.0, generators=(gen,))


def test_killed_training_resumes_to_the_same_weights(tmp_path):
    straight = _tiny()
    ref = _run(straight, tmp_path / "a.pt")
    resumed = _tiny()
    with pytest.raises(KeyboardInterrupt):
        _run(resumed, tmp_path / "b.pt", fail_at=13)
    assert (tmp_path / "b.pt").exists() and not (tmp_path / "b.pt.tmp").exists()
    again = _tiny()  # a fresh process: new model object, weights from the checkpoint
    res = _run(again, tmp_path / "b.pt")
    assert res.steps == ref.steps == 20
    assert res.val_history == ref.val_history
    for (k, a), (_, b) in zip(straight.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), k
    # a finished checkpoint is not trained again
    done = _tiny()
    assert _run(done, tmp_path / "b.pt").steps == 20
    assert all(torch.equal(a, b) for a, b in zip(done.state_dict().values(), again.state_dict().values()))


def test_checkpoint_for_another_schedule_is_refused(tmp_path):
    _run(_tiny(), tmp_path / "c.pt")
    data = torch.randint(0, 64, (200,))
    model = _tiny()
    with pytest.raises(ValueError, match="max_steps"):
        train_loop(model, lambda s: data[:17].unsqueeze(0), lambda: 0.0, lambda m, b: m(input_ids=b).logits.sum(),
                   max_steps=7, budget_s=10, progress=False, checkpoint=tmp_path / "c.pt")


def test_depth_growth_preserves_function_and_ablation_sees_every_layer():
    base = sharpen(_tiny(2))
    deep = grow_depth(base, LlamaConfig(**{**base.config.to_dict(), "num_hidden_layers": 6}))
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(deep(ids).logits, base(ids).logits, rtol=1e-5, atol=1e-5)
    windows = torch.randint(0, 64, (2, 17), generator=torch.Generator().manual_seed(4))
    ablation = layer_ablation(deep, windows)
    assert len(ablation) == 6
    # the zero-output copies contribute nothing until trained; the original layers do
    assert all(abs(ablation[j]) < 1e-5 for j in (1, 2, 4, 5))
    assert abs(ablation[0]) > 1e-3 and abs(ablation[3]) > 1e-3
    # what metrics.json reports for such a build
    assert {1, 2, 4, 5} <= set(unused_layers(ablation, mean_loss(deep, windows)))
    # a layer whose removal helps (negative) or barely hurts is not earning its cost: at a loss of 3 nats the
    # 0.01-nat floor decides; at a loss of 0.036 nats a layer must also move it by less than 1% (0.00036)
    assert unused_layers([0.5, 0.001, -0.2, 0.02], 3.0) == [1, 2]
    assert unused_layers([0.003, 0.0002, -0.001, 0.05], 0.036) == [1, 2]
    with pytest.raises(ValueError, match="multiple"):
        grow_depth(base, LlamaConfig(**{**base.config.to_dict(), "num_hidden_layers": 5}))


def test_split_growth_uses_every_layer_and_keeps_the_base_update():
    base = sharpen(_tiny(2))
    deep = grow_depth(base, LlamaConfig(**{**base.config.to_dict(), "num_hidden_layers": 6}), mode="split")
    for j in range(6):
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            got = deep.get_submodule(f"model.layers.{j}.{name}").weight
            want = base.get_submodule(f"model.layers.{j // 3}.{name}").weight / 3
            torch.testing.assert_close(got, want)
        torch.testing.assert_close(deep.model.layers[j].self_attn.q_proj.weight,
                                   base.model.layers[j // 3].self_attn.q_proj.weight)
    windows = torch.randint(0, 64, (2, 17), generator=torch.Generator().manual_seed(4))
    assert all(abs(a) > 1e-4 for a in layer_ablation(deep, windows))
    with pytest.raises(ValueError, match="mode"):
        grow_depth(base, deep.config, mode="stack")


def test_split_growth_with_uneven_copies():
    """Base layer 0 kept single, layer 1 copied three times: each copy's outputs are divided by its own group's
    size, so the grown model's first-order update per group is the base layer's; bad schedules are refused."""
    base = sharpen(_tiny(2))
    config = LlamaConfig(**{**base.config.to_dict(), "num_hidden_layers": 4})
    deep = grow_depth(base, config, mode="split", copies=(1, 3))
    source, group = [0, 1, 1, 1], [1, 3, 3, 3]
    for j in range(4):
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            got = deep.get_submodule(f"model.layers.{j}.{name}").weight
            want = base.get_submodule(f"model.layers.{source[j]}.{name}").weight / group[j]
            torch.testing.assert_close(got, want)
        torch.testing.assert_close(deep.model.layers[j].mlp.up_proj.weight,
                                   base.model.layers[source[j]].mlp.up_proj.weight)
    # zero mode with the same schedule computes exactly the base function
    zero = grow_depth(base, config, mode="zero", copies=(1, 3))
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(zero(ids).logits, base(ids).logits, rtol=1e-5, atol=1e-5)
    for bad in ((2, 3), (0, 4), (4,), (1, 1, 2)):
        with pytest.raises(ValueError, match="copies"):
            grow_depth(base, config, mode="split", copies=bad)


def test_pruning_drops_exactly_the_layers_that_do_nothing(tmp_path):
    base = sharpen(_tiny(2))
    deep = grow_depth(base, LlamaConfig(**{**base.config.to_dict(), "num_hidden_layers": 6}))  # 1, 2, 4, 5: zero copies
    # the base's own greedy text: there both of its layers matter (on random tokens skipping one can even help)
    start = torch.randint(0, 64, (2, 3), generator=torch.Generator().manual_seed(4))
    windows = base.generate(start, do_sample=False, max_new_tokens=14, pad_token_id=0)
    pruned, dropped = prune_unused(deep, windows)
    assert sorted(d["layer"] for d in dropped) == [1, 2, 4, 5]
    assert all(abs(d["ablation"]) < 1e-5 for d in dropped)
    assert pruned.config.num_hidden_layers == len(pruned.model.layers) == 2
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(pruned(ids).logits, base(ids).logits, rtol=1e-5, atol=1e-5)
    # renumbered layers: cached decoding and a save/load round trip are those of an ordinary 2-layer model
    out = pruned.generate(ids[:1], do_sample=False, max_new_tokens=8, pad_token_id=0)
    assert torch.equal(out, base.generate(ids[:1], do_sample=False, max_new_tokens=8, pad_token_id=0))
    pruned.save_pretrained(tmp_path)
    again = LlamaForCausalLM.from_pretrained(tmp_path)
    assert again.config.num_hidden_layers == 2
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, pruned(ids).logits)
    # a model whose every layer is used keeps them all
    kept, none = prune_unused(base, windows)
    assert none == [] and len(kept.model.layers) == 2
    with pytest.raises(ValueError, match="every layer"):
        drop_layers(_tiny(2), [0, 1])
