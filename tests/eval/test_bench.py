import json

import pytest

from mmspec.cli import main
from mmspec.eval import run_bench, to_markdown


def test_bench_tiny_config_writes_json_and_markdown(tmp_path):
    rc = main(["bench", "--model", "tiny:qwen2", "--draft", "tiny:qwen2", "--prompts", "2", "--max-new-tokens", "12",
               "--prompt-length", "16", "--out", str(tmp_path)])
    assert rc == 0
    report = json.loads((tmp_path / "bench.json").read_text())
    methods = {r["method"]: r for r in report["results"]}
    assert set(methods) == {"plain", "mmspec-plain", "hf-assisted", "hf-prompt-lookup", "chain", "tree",
                            "dynamic", "prompt-lookup"}
    for r in methods.values():
        assert r["exact"] == 1.0, r["method"]
        assert r["speedup"] > 0
    assert methods["chain"]["tau"] >= 1.0
    md = (tmp_path / "bench.md").read_text()
    assert "| tree |" in md
    # the cost model is printed beside the speedups, one row per timed mmspec method
    assert {r["method"] for r in report["cost_model"]} == set(methods) - {"plain", "hf-assisted", "hf-prompt-lookup"}
    assert "Cost model" in md and "| chain |" in md.split("Cost model")[1]


def test_bench_local_checkpoint_directory(tmp_path, tiny_pair):
    target, draft = tiny_pair
    target.save_pretrained(tmp_path / "target")
    draft.save_pretrained(tmp_path / "draft")
    report = run_bench(model=str(tmp_path / "target"), draft=str(tmp_path / "draft"),
                       methods=["chain", "hf-assisted"], num_prompts=2, prompt_length=12,
                       max_new_tokens=10, progress=False)
    assert sorted(r["method"] for r in report["results"]) == ["chain", "hf-assisted", "plain"]
    assert all(r["exact"] == 1.0 for r in report["results"])
    assert "chain" in to_markdown(report)


def test_bench_sampling_mode_reports_tau():
    report = run_bench(model="tiny:llama", draft="self", methods=["chain"], num_prompts=1,
                       prompt_length=12, max_new_tokens=10, do_sample=True, temperature=0.8, progress=False)
    chain = report["results"][1]
    assert chain["exact"] is None and chain["tau"] >= 1.0


def test_cli_reports_bad_input_as_error(capsys):
    assert main(["bench", "--model", "no/such/dir", "--prompts", "1"]) == 2
    assert "neither" in capsys.readouterr().err


def test_vlm_feature_chains_default_to_the_measured_length():
    """EAGLE / MSD chains draft DRAFT_TOKENS (8, chosen on held-out scenes) unless --feature-tokens says otherwise;
    the text-only chain keeps --num-tokens; FLASH drafts its head's block; a length < 1 is refused."""
    from mmspec.eval.config import EvalConfig
    from mmspec.eval.vlm_suite import feature_factories
    from mmspec.registry import DRAFT_TOKENS

    assert DRAFT_TOKENS["eagle"] == DRAFT_TOKENS["msd"] == 8
    default, five = feature_factories(num_tokens=3), feature_factories(num_tokens=3, feature_tokens=5)
    assert default["eagle-chain"]().num_tokens == default["msd-chain"]().num_tokens == 8
    assert default["msd-dynamic"]().num_tokens == 9 and default["chain"]().num_tokens == 3
    assert five["eagle-chain"]().num_tokens == five["msd-chain"]().num_tokens == 5
    assert default["flash-1"]().num_tokens == default["flash-1"]().net.config.sar_tokens
    with pytest.raises(ValueError, match="feature_tokens"):
        EvalConfig(suites="vlm", feature_tokens=0)
