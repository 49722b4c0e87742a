"""`mmspec bench --batch-sizes`: every method on batches of the suite's prompts against HF plain decoding at the
same batch size; every row equal to plain decoding's (greedy), HF's batch-1-only peers left out beyond batch 1."""

import json

import pytest

from mmspec.cli import main


@pytest.mark.parametrize("suite,methods", [("code", "hf-assisted,chain,chain-auto"), ("vlm", "msd-chain,msd-chain-auto")])
def test_sweep_files_and_rows(tmp_path, suite, methods):
    out = tmp_path / suite
    assert main(["bench", "--suite", suite, "--batch-sizes", "1,2", "--prompts", "2", "--max-new-tokens", "8",
                 "--methods", methods, "--out", str(out)]) == 0
    sweep = json.loads((out / "batch_sweep.json").read_text())
    rows = {(r["method"], r["batch"]): r for r in sweep["results"]}
    names = ["plain", *methods.split(",")]
    for m in names:
        for b in (1, 2):
            if m == "hf-assisted" and b == 2:
                assert (m, b) not in rows  # HF refuses assisted generation beyond batch 1
                continue
            r = rows[(m, b)]
            assert r["exact"] and r["speedup"] > 0 and r["tokens_per_s"] == pytest.approx(r["tokens_per_s_per_row"] * b)
    assert rows[("plain", 2)]["speedup"] == 1.0
    assert (out / "batch_sweep.png").stat().st_size > 1000
    assert "| method | batch 1 | batch 2 |" in (out / "batch_sweep.md").read_text()


@pytest.mark.parametrize("argv,message", [
    (["--suite", "code", "--batch-sizes", "1,x"], "comma list of ints"),
    (["--suite", "image", "--batch-sizes", "1,2"], "--suite code or vlm"),
    (["--suite", "code", "--batch-sizes", "1,0"], "batch sizes must be ints >= 1"),
    (["--suite", "code", "--batch-sizes", "1,64", "--prompts", "2"], "needs at least that many prompts"),
])
def test_bad_sweeps_are_one_error_line(tmp_path, capsys, argv, message):
    assert main(["bench", *argv, "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err
