"""Every example runs (tiny settings, the committed zoo): a smoke test per file in examples/."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNS = {
    "text_generation.py": (["--max-new-tokens", "8"], "identical to target.generate: True"),
    "diffusion_drafting.py": (["--max-new-tokens", "12"], "identical to greedy: True"),
    "generate_images.py": (["--classes", "0", "--out", "{tmp}/images"], "LANTERN++"),
    "vlm_inference.py": (["--scenes", "1", "--max-new-tokens", "6"], "τ ="),
    "flash_compression_cost.py": (["--quick"], "FLASH, 8 per image"),
    "dflash_sampling_drafts.py": (["vlm", "--quick"], "round 1: DDTree, greedy block"),
}


def test_every_example_has_a_smoke_run():
    assert sorted(p.name for p in (ROOT / "examples").glob("*.py")) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_example_runs(name, tmp_path):
    args, expect = RUNS[name]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("MMSPEC_HOME", None)  # the committed zoo
    res = subprocess.run([sys.executable, str(ROOT / "examples" / name), *[a.format(tmp=tmp_path) for a in args]],
                         capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert expect in res.stdout, res.stdout[-2000:]
