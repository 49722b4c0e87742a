"""User checkpoints of remote-code diffusion LMs (LLaDA / Dream style) through DiffusionLM.from_pretrained.

A tiny bidirectional masked LM is written as a custom model package (``modeling_tinydream.py`` with its
config class), saved with an ``auto_map`` so that ``AutoConfig`` / ``AutoModel`` load it with
``trust_remote_code=True`` -- entirely offline, inside pytest's temporary directories.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import importlib.util
import json
import sys

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters import DEERDrafter, DiffusionLM
from mmspec.state import DecodeState
from mmspec.tiny import tiny_model
from mmspec.verifiers.logits import SamplingConfig

V = 64  # vocabulary of the custom drafter (and of the matching target)
MASK = 61  # the config's mask id: not the last id, so a guessed "vocab_size - 1" would be caught
MODULE = "modeling_tinydream"

MODELING_SRC = '''\
"""A tiny bidirectional masked LM, written as a remote-code checkpoint would ship it."""

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput


class TinyDreamConfig(PretrainedConfig):
    model_type = "__MODEL_TYPE__"

    def __init__(self, vocab_size=64, hidden_size=32, max_position_embeddings=64, mask_token_id=None, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.mask_token_id = mask_token_id
        super().__init__(**kwargs)


class TinyDreamModel(PreTrainedModel):
    config_class = TinyDreamConfig
    base_model_prefix = "tinydream"

    def __init__(self, config):
        super().__init__(config)
        h = config.hidden_size
        self.embed = nn.Embedding(config.vocab_size, h)
        self.pos = nn.Embedding(config.max_position_embeddings, h)
        self.layer = nn.TransformerEncoderLayer(h, nhead=4, dim_feedforward=2 * h, dropout=0.0, batch_first=True)
        self.head = nn.Linear(h, config.vocab_size)
        self.post_init()

    def _init_weights(self, module):
        pass  # torch's own initialisation (seeded by the caller); every weight is saved anyway

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        T = input_ids.shape[1]
        x = self.embed(input_ids) + self.pos(torch.arange(T, device=input_ids.device))[None]
        padding = None
        if attention_mask is not None:
            if attention_mask.dim() != 2:
                raise ValueError("this model takes a 2-D padding mask only")
            padding = ~attention_mask.bool()
        x = self.layer(x, src_key_padding_mask=padding)  # no attention mask: every position sees every other
        return MaskedLMOutput(logits=self.head(x))
'''


def write_checkpoint(folder, model_type="tinydream", mask_token_id=MASK, seed=0):
    """Save a TinyDreamModel checkpoint (weights, config.json with auto_map, the .py file) into ``folder``."""
    src = folder.parent / f"src_{folder.name}"
    src.mkdir(parents=True)
    (src / f"{MODULE}.py").write_text(MODELING_SRC.replace("__MODEL_TYPE__", model_type))
    spec = importlib.util.spec_from_file_location(MODULE, src / f"{MODULE}.py")
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(MODULE)
    sys.modules[MODULE] = module  # custom_object_save copies sys.modules[cls.__module__].__file__
    try:
        spec.loader.exec_module(module)
        module.TinyDreamConfig.register_for_auto_class()
        module.TinyDreamModel.register_for_auto_class("AutoModel")
        config = module.TinyDreamConfig(vocab_size=V, hidden_size=32, max_position_embeddings=64,
                                        mask_token_id=mask_token_id)
        torch.manual_seed(seed)
        model = module.TinyDreamModel(config).eval()
        config.save_pretrained(folder)
        model.save_pretrained(folder)
    finally:
        if previous is None:
            sys.modules.pop(MODULE, None)
        else:
            sys.modules[MODULE] = previous
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(folder, the in-memory model that was saved there)."""
    folder = tmp_path_factory.mktemp("remote") / "tinydream"
    model = write_checkpoint(folder)
    return folder, model


def prompts(batch=2, length=10, seed=0):
    return torch.randint(3, 60, (batch, length), generator=torch.Generator().manual_seed(seed))


def record_calls(model):
    """Record (args, kwargs) of every forward call of ``model``; returns the list and the hook handle."""
    calls = []

    def hook(module, args, kwargs):
        calls.append((args, dict(kwargs)))

    return calls, model.register_forward_pre_hook(hook, with_kwargs=True)


# ---------------------------------------------------------------------------------------------------- loading
def test_checkpoint_is_a_remote_code_package(checkpoint):
    """The saved folder carries an auto_map for AutoConfig/AutoModel and the modeling file next to the weights."""
    folder, _ = checkpoint
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model_type"] == "tinydream"
    assert cfg["mask_token_id"] == MASK
    assert cfg["auto_map"] == {"AutoConfig": f"{MODULE}.TinyDreamConfig", "AutoModel": f"{MODULE}.TinyDreamModel"}
    assert (folder / f"{MODULE}.py").is_file()
    assert any(p.suffix == ".safetensors" for p in folder.iterdir())


def test_from_pretrained_loads_through_remote_code(checkpoint):
    """from_pretrained goes through AutoModel + trust_remote_code: the convention is read off the model_type
    ("dream"), the mask id off the config, attention is native and context a window; the weights are the
    saved ones and the model is in eval mode."""
    folder, saved = checkpoint
    dlm = DiffusionLM.from_pretrained(folder, trust_remote_code=True)
    model = dlm.model
    assert type(model).__name__ == "TinyDreamModel"
    assert type(model).__module__.startswith("transformers_modules")  # the dynamic-module copy, not ours
    assert type(model) is not type(saved)
    assert not model.training
    assert dlm.convention == "dream"
    assert dlm.mask_token_id == MASK
    assert dlm.attention == "native" and dlm.context == "window" and dlm.window == 96
    assert dlm.vocab_size == V
    assert dlm.max_positions == 64  # read from the config's max_position_embeddings
    assert dlm.begin(_state([prompts(batch=1)[0]]), 48, 4) is None  # a window context keeps no cache per call
    for name, p in saved.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], p, atol=0, rtol=0)


def test_from_pretrained_keeps_explicit_arguments(checkpoint):
    """Explicit convention / mask id / context / window win over what the config says."""
    folder, _ = checkpoint
    dlm = DiffusionLM.from_pretrained(folder, trust_remote_code=True, convention="llada", mask_token_id=5, context="full", window=7)
    assert (dlm.convention, dlm.mask_token_id, dlm.context, dlm.window, dlm.attention) == ("llada", 5, "full", 7,
                                                                                           "native")
    with pytest.raises(ValueError, match="needs attention='mask'"):  # no KV cache for a remote-code model
        DiffusionLM.from_pretrained(folder, trust_remote_code=True, context="cache")


@pytest.mark.parametrize("model_type,convention", [("tiny-llada", "llada"), ("diffucoder-tiny", "dream")])
def test_convention_from_other_model_types(tmp_path, model_type, convention):
    """model_type containing "llada" means the llada convention, "diffucoder" the dream one."""
    write_checkpoint(tmp_path / "ckpt", model_type=model_type)
    dlm = DiffusionLM.from_pretrained(tmp_path / "ckpt", trust_remote_code=True)
    assert dlm.convention == convention and dlm.attention == "native"


def test_unknown_model_type_needs_a_convention(tmp_path):
    """A model_type that names no known family is an error without convention=, and loads with it."""
    write_checkpoint(tmp_path / "ckpt", model_type="something-else")
    with pytest.raises(ValueError, match="convention"):
        DiffusionLM.from_pretrained(tmp_path / "ckpt", trust_remote_code=True)
    dlm = DiffusionLM.from_pretrained(tmp_path / "ckpt", trust_remote_code=True, convention="dream")
    assert dlm.convention == "dream" and dlm.mask_token_id == MASK and dlm.context == "window"


def test_missing_mask_id_is_an_error(tmp_path):
    """No mask id in the config and no tokenizer next to the weights: a ValueError asking for mask_token_id=."""
    write_checkpoint(tmp_path / "ckpt", mask_token_id=None)
    with pytest.raises(ValueError, match="no mask token id"):
        DiffusionLM.from_pretrained(tmp_path / "ckpt", trust_remote_code=True)
    assert DiffusionLM.from_pretrained(tmp_path / "ckpt", trust_remote_code=True, mask_token_id=3).mask_token_id == 3


# ---------------------------------------------------------------------------------------------------- slots
def _state(rows, capacity=48):
    """A left-padded DecodeState holding ``rows`` (1-D tensors of different lengths)."""
    n = max(len(r) for r in rows)
    tokens = torch.zeros(len(rows), capacity, dtype=torch.long)
    for b, r in enumerate(rows):
        tokens[b, n - len(r):n] = r
    return DecodeState(tokens=tokens, lengths=torch.full((len(rows),), n),
                       starts=torch.tensor([n - len(r) for r in rows]), prompt_length=n - 1,
                       active=torch.ones(len(rows), dtype=torch.bool), sampling=SamplingConfig())


@pytest.mark.parametrize("convention,window", [("dream", 96), ("dream", 4), ("llada", 96)])
def test_slot_logprobs_are_the_models_own_distributions(checkpoint, convention, window):
    """Each slot's log-probs are log_softmax of the model's logits on (the row's last `window` tokens) + k
    masks: for dream the position before the slot (i predicts i+1), for llada the slot itself. Rows are
    read one by one without their padding, and the model is called with input_ids only."""
    folder, _ = checkpoint
    k = 4
    rows = [prompts(batch=1, length=11, seed=1)[0], prompts(batch=1, length=7, seed=2)[0]]
    state = _state(rows)
    dlm = DiffusionLM.from_pretrained(folder, trust_remote_code=True, convention=convention, window=window)
    cache = dlm.begin(state, 48, k)
    calls, handle = record_calls(dlm.model)
    try:
        got = dlm.slot_logprobs(state, k, cache)
    finally:
        handle.remove()
    assert got.shape == (2, k, V) and got.dtype == torch.float32
    assert len(calls) == 2  # one forward per row
    for (args, kwargs), row in zip(calls, rows):
        ctx = row[-window:]
        assert args == () and set(kwargs) == {"input_ids"}
        assert torch.equal(kwargs["input_ids"][0], torch.cat([ctx, torch.full((k,), MASK)]))
    with torch.no_grad():
        for b, row in enumerate(rows):
            ctx = row[-window:]
            n = len(ctx)
            logits = dlm.model(input_ids=torch.cat([ctx, torch.full((k,), MASK)])[None]).logits[0]
            ref = logits[n - 1:n - 1 + k] if convention == "dream" else logits[n:n + k]
            torch.testing.assert_close(got[b], torch.log_softmax(ref.float(), -1), atol=1e-6, rtol=1e-6)
    # the distributions differ between rows and slots: the comparison above is not between constants
    assert not torch.allclose(got[0], got[1]) and not torch.allclose(got[0, 0], got[0, 1])


def test_native_input_is_checked_against_max_positions(checkpoint):
    """Full context longer than the config's max_position_embeddings is refused before the model runs."""
    folder, _ = checkpoint
    dlm = DiffusionLM.from_pretrained(folder, trust_remote_code=True, context="full")
    state = _state([prompts(batch=1, length=62)[0]], capacity=80)
    assert dlm.slot_logprobs(state, 2).shape == (1, 2, V)  # 64 positions: fits
    with pytest.raises(ValueError, match="max_position_embeddings"):
        dlm.slot_logprobs(state, 3)


# ---------------------------------------------------------------------------------------------------- engine
@pytest.mark.parametrize("bias,acceptance", [(None, None), ((20.0, 1.0), "all"), ((20.0, 0.1), "mixed")])
def test_deer_with_a_remote_code_drafter_is_greedy_exact(checkpoint, greedy_reference, bias, acceptance):
    """DEER drafting from the remote-code model reproduces the target's own greedy generate exactly, and the
    drafter really ran (native calls: context + 3 mask slots, input_ids only). The random pair never agrees,
    so two biased variants make drafts get accepted: the drafter always proposes token 7 and the target
    prefers it always ("all": every full step accepts 3 drafts + 1) or only sometimes ("mixed")."""
    folder, _ = checkpoint
    target = tiny_model("llama", seed=0, vocab_size=V, hidden_size=32)
    dlm = DiffusionLM.from_pretrained(folder, trust_remote_code=True)
    if bias is not None:
        with torch.no_grad():
            dlm.model.head.bias[7] += bias[0]
            target.lm_head.bias = torch.nn.Parameter(torch.zeros(V).index_fill(0, torch.tensor([7]), bias[1]))
    ids = prompts()
    mask = torch.ones_like(ids)
    ids[1, :3] = 0
    mask[1, :3] = 0  # a left-padded row
    ref = greedy_reference(target, ids, 12, attention_mask=mask)
    calls, handle = record_calls(dlm.model)
    try:
        out = SpeculativeGenerator(target, DEERDrafter(dlm, num_tokens=3)).generate(
            ids, attention_mask=mask, max_new_tokens=12, eos_token_id=[])
    finally:
        handle.remove()
    assert ref.shape == (2, 22)
    assert torch.equal(out.sequences, ref)
    assert len(calls) >= 2
    rows = [out.sequences[0], out.sequences[1, 3:]]  # each row's real tokens, without the padding
    for args, kwargs in calls:
        assert args == () and set(kwargs) == {"input_ids"}
        ctx, slots = kwargs["input_ids"][0, :-3], kwargs["input_ids"][0, -3:]
        assert torch.equal(slots, torch.full((3,), MASK))
        # the context is a row's real tokens so far (no padding, nothing else)
        assert any(len(ctx) <= len(r) and torch.equal(r[:len(ctx)], ctx) for r in rows)
    assert len({kw["input_ids"].shape[1] for _, kw in calls}) > 2  # the context grows as tokens are accepted
    steps = out.stats.accept_lengths  # per row: the prefill's token first, the last step cut by max_new_tokens
    assert all(sum(s) == 12 for s in steps)
    if acceptance == "all":
        assert all(s[1:-1] == [4] * (len(s) - 2) for s in steps) and (ref[:, 10:] == 7).all()
    elif acceptance == "mixed":
        later = [a for s in steps for a in s[1:]]
        assert 1 in later and max(later) > 1  # rejections and acceptances both happened


def test_deer_single_row_greedy_exact(checkpoint, greedy_reference):
    """The brief's plain case: one unpadded row, target.generate(ids) == SpeculativeGenerator(...).generate(ids)."""
    folder, _ = checkpoint
    target = tiny_model("llama", seed=0, vocab_size=V, hidden_size=32)
    ids = prompts(batch=1, seed=3)
    ref = greedy_reference(target, ids, 12)
    out = SpeculativeGenerator(target, DEERDrafter(DiffusionLM.from_pretrained(folder, trust_remote_code=True), num_tokens=3)).generate(
        ids, max_new_tokens=12, eos_token_id=[])
    assert torch.equal(out.sequences, ref)


# ---------------------------------------------------------------------------------------------------- vocabularies
def test_target_vocabulary_bigger_than_the_drafters_is_an_error(checkpoint):
    """A target with more ids than the drafter: the generator refuses the pair; declaring the target's vocab
    size to from_pretrained refuses it earlier (check_vocabularies)."""
    folder, _ = checkpoint
    target = tiny_model("llama", seed=0, vocab_size=V + 16, hidden_size=32)
    dlm = DiffusionLM.from_pretrained(folder, trust_remote_code=True)
    with pytest.raises(ValueError, match="does not match the target"):
        SpeculativeGenerator(target, DEERDrafter(dlm, num_tokens=3))
    with pytest.raises(ValueError, match="smaller than the target"):
        DiffusionLM.from_pretrained(folder, trust_remote_code=True, target_vocab_size=V + 16)


def test_drafter_vocabulary_superset_is_cut_to_the_targets(checkpoint, greedy_reference):
    """A drafter with extra ids (the mask among them, as Dream over Qwen) proposes only the target's ids and
    stays greedy-exact."""
    folder, _ = checkpoint
    small = 48  # MASK (61) is outside the target's vocabulary
    target = tiny_model("llama", seed=0, vocab_size=small, hidden_size=32)
    dlm = DiffusionLM.from_pretrained(folder, trust_remote_code=True, target_vocab_size=small)
    assert dlm.vocab_size == small
    ids = prompts(batch=1, seed=4) % small
    state = _state([ids[0]])
    assert dlm.slot_logprobs(state, 3).shape == (1, 3, small)
    ref = greedy_reference(target, ids, 12)
    out = SpeculativeGenerator(target, DEERDrafter(dlm, num_tokens=3)).generate(ids, max_new_tokens=12,
                                                                                eos_token_id=[])
    assert torch.equal(out.sequences, ref)


def test_remote_code_needs_explicit_trust(checkpoint):
    """A checkpoint that ships its own modeling code does not run it unless the user says so."""
    folder, _ = checkpoint
    with pytest.raises(ValueError, match="trust_remote_code"):
        DiffusionLM.from_pretrained(folder)


# ---------------------------------------------------------------------------------------------------- every face
def test_pipeline_takes_a_remote_code_drafter_directory(checkpoint, greedy_reference):
    """mmspec.pipeline(target, drafter=DIR) refuses a remote-code directory without trust_remote_code (naming the
    modeling file and the flag) and with it drafts DEER-style, greedy-exact."""
    import mmspec
    from mmspec.loading import load_drafter
    from mmspec.targets import Target

    folder, _ = checkpoint
    target = tiny_model("llama", seed=0, vocab_size=V, hidden_size=32)
    with pytest.raises(ValueError, match=f"ships its own modeling code \\({MODULE}.py\\).*trust_remote_code=True"):
        mmspec.pipeline(target, drafter=str(folder))
    pipe = mmspec.pipeline(target, drafter=str(folder), trust_remote_code=True, num_tokens=3)
    assert pipe.method == "deer" and type(pipe.drafter.dlm.model).__name__ == "TinyDreamModel"
    ids = prompts(batch=1, seed=5)
    ref = greedy_reference(target, ids, 10)
    out = pipe.engine.generate(ids, max_new_tokens=10, eos_token_id=[])
    assert torch.equal(out.sequences, ref)
    # the eval route's loader (mmspec eval --dlm DIR --trust-remote-code) goes through the same door
    dlm = load_drafter(str(folder), Target(target, None, "text", "t"), trust_remote_code=True)
    assert isinstance(dlm, DiffusionLM) and dlm.attention == "native"


def test_cli_flags_for_remote_code():
    """`mmspec eval --trust-remote-code` sets the eval config's field; `mmspec train deer` takes the flag."""
    from mmspec.cli import build_parser
    from mmspec.eval.config import config_from_args

    parser = build_parser()
    args = parser.parse_args(["eval", "--dlm", "somewhere", "--trust-remote-code"])
    assert config_from_args(args).trust_remote_code is True
    assert config_from_args(parser.parse_args(["eval", "--dlm", "somewhere"])).trust_remote_code is False
    args = parser.parse_args(["train", "deer", "--dlm", "somewhere", "--trust-remote-code", "--out", "x"])
    assert args.trust_remote_code is True


def test_train_deer_loader_needs_trust_and_loads(checkpoint):
    from mmspec.training.deer import load_dlm

    folder, saved = checkpoint
    with pytest.raises(ValueError, match="--trust-remote-code"):
        load_dlm(str(folder))
    model, _ = load_dlm(str(folder), trust_remote_code=True)
    assert type(model).__name__ == "TinyDreamModel"
    torch.testing.assert_close(model.state_dict()["head.weight"], saved.state_dict()["head.weight"])


@pytest.mark.parametrize("where", ["import", "forward"])
def test_broken_remote_code_names_the_file(tmp_path, where):
    """Remote code written for an older transformers: an import that no longer exists fails at loading, a removed
    helper at the first forward; both come back as a ValueError naming the modeling file, the line and the error."""
    folder = tmp_path / "ckpt"
    write_checkpoint(folder)
    src = (folder / f"{MODULE}.py").read_text()
    if where == "import":
        src = src.replace("from torch import nn\n", "from torch import nn\nfrom transformers.modeling_utils import "
                          "find_pruneable_heads_and_indices\n")
    else:
        src = src.replace("        return MaskedLMOutput(", "        self.config.removed_helper()\n"
                          "        return MaskedLMOutput(")
    (folder / f"{MODULE}.py").write_text(src)
    if where == "import":
        with pytest.raises(ValueError, match=f"{MODULE}.py.*ImportError.*find_pruneable_heads_and_indices"):
            DiffusionLM.from_pretrained(folder, trust_remote_code=True)
        return
    dlm = DiffusionLM.from_pretrained(folder, trust_remote_code=True)
    with pytest.raises(ValueError, match=f"{MODULE}.py, line \\d+ .*removed_helper.*AttributeError"):
        dlm.slot_logprobs(_state([prompts(batch=1)[0]]), 2)


def test_train_deer_errors_inside_remote_code_name_the_file(checkpoint):
    """DEER's alignment calls the drafter with a 4-D mask and position ids; a remote model that refuses them
    (this one takes a 2-D padding mask only) fails with a ValueError naming its modeling file and line, as
    `mmspec train deer` wraps the alignment in the same handler as loading. Errors of mmspec's own checks pass
    through unchanged."""
    from mmspec.drafters.remote_code import explain_remote_failure, modeling_files
    from mmspec.training.dlm import block_loss
    from mmspec.training.deer import load_dlm

    folder, _ = checkpoint
    dlm, _tok = load_dlm(str(folder), trust_remote_code=True)
    tokens = prompts(batch=2, length=12)
    with pytest.raises(ValueError, match=f"{MODULE}.py, line \\d+ .*2-D padding mask only"):
        with explain_remote_failure(*dlm._mmspec_remote):
            block_loss(dlm, tokens, torch.tensor([12, 10]), torch.tensor([8, 6]), torch.ones(2, 12), MASK)
    with pytest.raises(ValueError, match="^not from the remote file$"):
        with explain_remote_failure(str(folder), modeling_files(folder)):
            raise ValueError("not from the remote file")
