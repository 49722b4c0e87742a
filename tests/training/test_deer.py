"""DEER's training recipes: batch construction, Stage I/II weights, attention patterns, losses."""

import pytest
import torch

from mmspec.tiny import tiny_model
from mmspec.training.deer import DEERConfig, Generations, stage1_batch, stage2_batch, target_generations
from mmspec.training.dlm import attention_mask, block_agreement, block_loss, mdlm_loss

MASK = 2


def generations(n=6, prefix=5, gen=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(4, 60, (n, prefix + gen), generator=g)
    return Generations(tokens, torch.full((n,), prefix), gen)


def test_stage1_masks_the_rest_of_the_continuation_with_1_over_t():
    data, cfg = generations(), DEERConfig(k_max=8)
    b = stage1_batch(data, torch.arange(6), cfg, torch.Generator().manual_seed(1))
    R = b["lengths"] - b["n_clean"]
    u = b["n_clean"] - data.prefix
    assert ((R == (12 - u).clamp(max=8)) & (R >= 1)).all()
    torch.testing.assert_close(b["row_weights"], 12 / R.float())  # 1/t, t = masked share of the continuation


def test_stage2_weights_are_alpha_powers():
    data, cfg = generations(), DEERConfig(r_max=6, alpha=1.01)
    b = stage2_batch(data, torch.arange(6), cfg, torch.Generator().manual_seed(2))
    for row in range(6):
        n, L = int(b["n_clean"][row]), int(b["lengths"][row])
        R = L - n
        assert 1 <= R <= 6 and n >= data.prefix[row]
        w = b["weights"][row]
        expected = torch.tensor([1.01 ** (R - i) for i in range(1, R + 1)])
        torch.testing.assert_close(w[n:L], expected)  # slot 1 (right after the prefix) weighs most
        assert (w[:n] == 0).all()


def test_attention_patterns():
    valid = torch.tensor([[True, True, True, True, False]])
    full = attention_mask(valid, None, "bidirectional")[0, 0]
    assert full[0, 3] and not full[0, 4] and full[4, 4]  # padding only sees itself
    cache = attention_mask(valid, torch.tensor([2]), "cache")[0, 0]
    assert not cache[0, 1] and cache[1, 0]  # clean tokens: causal
    assert cache[2, 3] and cache[3, 0]  # the block sees everything
    with pytest.raises(ValueError):
        attention_mask(valid, None, "sideways")


def test_losses_train_and_agreement_counts_leading_hits():
    model = tiny_model("llama", seed=0, vocab_size=64, num_layers=1)
    data = generations()
    g = torch.Generator().manual_seed(0)
    loss = mdlm_loss(model, data.tokens, MASK, "dream", g)
    assert torch.isfinite(loss) and loss > 0
    loss.backward()
    assert model.lm_head.weight.grad.abs().sum() > 0
    b = stage2_batch(data, torch.arange(6), DEERConfig(r_max=4), g)
    for convention in ("dream", "llada"):
        lb = block_loss(model, b["tokens"], b["lengths"], b["n_clean"], b["weights"], MASK, convention)
        assert torch.isfinite(lb)
    # greedy agreement of a 4-slot block right after each prefix: a count in [0, 4], one hit rate per slot
    agree = block_agreement(model, data.tokens, data.prefix + 4, data.prefix.clone(), MASK)
    assert 0 <= agree["accepted"] <= 4 and len(agree["slot_hit"]) == 4


def test_clean_prefix_loss_is_added_on_request():
    model = tiny_model("llama", seed=0, vocab_size=64, num_layers=1)
    data = generations()
    b = stage2_batch(data, torch.arange(6), DEERConfig(r_max=4), torch.Generator().manual_seed(3))
    args = (model, b["tokens"], b["lengths"], b["n_clean"], b["weights"], MASK, "dream")
    with torch.no_grad():
        plain, with_clean = block_loss(*args), block_loss(*args, clean_weight=1.0)
    assert with_clean > plain  # the clean next-token CE is positive for an untrained model


def test_soft_distillation_targets_are_aligned():
    from mmspec.training.dlm import teacher_slot_logp

    teacher = tiny_model("llama", seed=4, vocab_size=64, num_layers=1)
    data = generations()
    lengths = torch.full((6,), data.tokens.shape[1])
    soft = teacher_slot_logp(teacher, data.tokens, lengths)
    with torch.no_grad():
        ref = torch.log_softmax(teacher(input_ids=data.tokens).logits.float(), -1)
    torch.testing.assert_close(soft[:, 1:], ref[:, :-1])  # entry i: the teacher's distribution of token i
    b = stage2_batch(data, torch.arange(6), DEERConfig(r_max=4), torch.Generator().manual_seed(5))
    student = tiny_model("llama", seed=0, vocab_size=64, num_layers=1)
    kl = block_loss(student, b["tokens"], b["lengths"], b["n_clean"], b["weights"], MASK, "dream",
                    teacher_logp=teacher_slot_logp(teacher, b["tokens"], b["lengths"]), clean_weight=1.0)
    assert torch.isfinite(kl) and kl > 0


def test_stage_keeps_the_weights_with_the_longest_heldout_accepted_run():
    """select="accepted": the stage keeps the evaluated weights whose greedy-accepted length on the held-out
    generations is the longest (here an early one: a high learning rate makes later ones worse), and reports
    those lengths (positive) instead of a loss."""
    from mmspec.training.deer import agreement, stage_report, train_stage

    torch.manual_seed(0)
    model = tiny_model(vocab_size=64, hidden_size=32, num_layers=1)
    train = generations(n=16, seed=1)
    val = Generations(train.tokens[:8].clone(), train.prefix[:8].clone(), train.gen_len)
    cfg = DEERConfig(k_max=4, r_max=4, batch_size=8, lr=3e-2, stage1_steps=60, eval_every=5, patience=100,
                     stage1_budget_s=60.0)
    report = stage_report(train_stage(model, 1, train, val, MASK, cfg, progress=False), cfg)
    history = [v for _, v in report["val_history"]]
    assert len(history) == 12 and report["best_val_accepted"] == max(history) > history[-1]
    assert agreement(model, val, 4, MASK, cfg)["accepted"] == pytest.approx(max(history))  # the kept weights
    assert "best_val_loss" not in report and report["selected_on"].startswith("held-out accepted length")


def test_stage_selection_must_be_named():
    from mmspec.training.deer import train_stage

    with pytest.raises(ValueError, match="select"):
        train_stage(tiny_model(vocab_size=64, hidden_size=32, num_layers=1), 1, generations(), generations(), MASK,
                    DEERConfig(k_max=4, select="best"), progress=False)


def test_target_generations_resume_after_a_kill(tmp_path, monkeypatch):
    """A generation run killed after its first batch goes on from the saved batch: same rows as one uninterrupted
    run, and a partial file made with other settings is refused."""
    target = tiny_model("llama", seed=3).eval()
    stream = torch.randint(3, target.config.vocab_size, (400,), generator=torch.Generator().manual_seed(1))
    cfg = DEERConfig(gen_len=5, prefix_min=4, prefix_max=9, gen_batch=2)
    whole = target_generations(target, stream, 6, cfg, seed=11, progress=False)

    calls = {"n": 0}
    generate = target.generate

    def dies_on_second_batch(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("killed")
        return generate(*args, **kwargs)

    part = tmp_path / "gen.partial.pt"
    target.generate = dies_on_second_batch
    with pytest.raises(KeyboardInterrupt):
        target_generations(target, stream, 6, cfg, seed=11, progress=False, partial=part)
    target.generate = generate
    resumed = target_generations(target, stream, 6, cfg, seed=11, progress=False, partial=part)
    assert torch.equal(resumed.tokens, whole.tokens) and torch.equal(resumed.prefix, whole.prefix)
    with pytest.raises(ValueError, match="other settings"):
        target_generations(target, stream, 8, cfg, seed=11, progress=False, partial=part)
    # the preallocated cache generates the same tokens as generate's growing one
    monkeypatch.setattr("mmspec.training.deer._generation_cache", lambda target: {})
    grown = target_generations(target, stream, 6, cfg, seed=11, progress=False)
    assert torch.equal(grown.tokens, whole.tokens)


def _full_logits_block_loss(model, b, convention, clean_weight, teacher_logp=None, row_weights=None):
    """block_loss as written before the LM head ran on the read slots only: every position's logits."""
    from mmspec.training.dlm import slot_logits

    tokens, lengths, n_clean, weights = b["tokens"], b["lengths"], b["n_clean"], b["weights"]
    B, T = tokens.shape
    col = torch.arange(T)[None, :]
    valid = col < lengths[:, None]
    block = valid & (col >= n_clean[:, None])
    ids = torch.where(block, MASK, torch.where(valid, tokens, 0))
    logits = slot_logits(model, ids, attention_mask(valid, n_clean, "cache"), convention).float()
    if teacher_logp is None:
        ce = torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), tokens.reshape(-1),
                                               reduction="none").view(B, T)
    else:
        ce = (teacher_logp.exp() * (teacher_logp - torch.log_softmax(logits, -1))).sum(-1)
    w = weights * block
    per_row = (ce * w).sum(1) / w.sum(1).clamp(min=1e-8)
    loss = per_row.mean() if row_weights is None else (per_row * row_weights).sum() / row_weights.sum()
    if clean_weight > 0 and convention == "dream":
        clean = (col >= 1) & (col < n_clean[:, None])
        loss = loss + clean_weight * (ce * clean).sum() / clean.sum().clamp(min=1)
    return loss


def test_losses_read_only_their_slots_and_equal_the_full_logits_losses():
    """The LM head runs on the slots a loss reads; the losses and their gradients are those of the full logits
    (sharpened weights, so a wrong slot or shift would show), for both conventions, hard and soft labels."""
    from mmspec.training.dlm import slot_logits
    from tests.tiny_models import sharpen

    model = sharpen(tiny_model("llama", seed=0, vocab_size=64, num_layers=1)).train()
    data = generations(n=5, prefix=6, gen=10)
    g = torch.Generator().manual_seed(0)
    b = stage1_batch(data, torch.arange(5), DEERConfig(k_max=6), g)  # ragged rows: right padding
    teacher = torch.log_softmax(torch.randn(*b["tokens"].shape, 64, generator=g), -1)
    for convention in ("dream", "llada"):
        for clean_weight, soft, rows in ((0.0, None, None), (0.5, None, b["row_weights"]), (0.5, teacher, None)):
            got = block_loss(model, b["tokens"], b["lengths"], b["n_clean"], b["weights"], MASK, convention,
                             row_weights=rows, clean_weight=clean_weight, teacher_logp=soft)
            want = _full_logits_block_loss(model, b, convention, clean_weight, soft, rows)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
            grads = torch.autograd.grad(got, [model.lm_head.weight, model.model.embed_tokens.weight])
            refs = torch.autograd.grad(want, [model.lm_head.weight, model.model.embed_tokens.weight])
            for a, r in zip(grads, refs):
                torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-6)
    # MDLM: the same draws give the full-logits loss
    for convention in ("dream", "llada"):
        got = mdlm_loss(model, data.tokens, MASK, convention, torch.Generator().manual_seed(5))
        gen = torch.Generator().manual_seed(5)
        B, T = data.tokens.shape
        t = torch.rand(B, 1, generator=gen).clamp(min=1e-3)
        masked = torch.rand(B, T, generator=gen) < t
        if convention == "dream":
            masked[:, 0] = False
        ids = torch.where(masked, MASK, data.tokens)
        logits = slot_logits(model, ids, attention_mask(torch.ones(B, T, dtype=torch.bool), None, "bidirectional"),
                             convention).float()
        ce = torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), data.tokens.reshape(-1),
                                               reduction="none").view(B, T)
        torch.testing.assert_close(got, ((ce * masked).sum(1) / t.squeeze(1) / T).mean(), rtol=1e-5, atol=1e-6)
