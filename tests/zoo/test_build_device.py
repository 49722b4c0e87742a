"""`mmspec zoo build --device`: the device the zoo trains on, refused where absent; the code corpus override."""

import pytest
import torch

from mmspec.zoo import code_data
from mmspec.zoo.builder import build
from mmspec.zoo.common import build_device, building_on


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_a_named_but_absent_gpu_is_refused_before_anything_is_built(tmp_path):
    with pytest.raises(ValueError, match="no CUDA device"):
        build("code", micro=True, home=tmp_path, device="cuda")
    assert not any(tmp_path.iterdir())  # nothing trained, nothing written


def test_an_unsupported_device_is_refused():
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        with building_on("meta"):
            pass


def test_the_build_device_is_set_for_the_block_only():
    assert build_device().type == "cpu"
    with building_on("cpu") as dev:
        assert build_device() == dev
        assert not torch.backends.cudnn.allow_tf32  # fp32 convolutions while building
    assert build_device().type == "cpu"


def test_the_code_corpus_can_be_read_from_a_copy_of_a_standard_library(tmp_path, monkeypatch):
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "tool.py").write_text("def f():\n    return 1\n")
    (tmp_path / "abc.py").write_text("x = 1\n")
    monkeypatch.setenv(code_data.CORPUS_ENV, str(tmp_path))
    assert code_data.stdlib_root() == tmp_path
    assert sorted(code_data.list_modules()) == ["abc.py", "json/tool.py"]
    monkeypatch.setenv(code_data.CORPUS_ENV, str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="not a directory"):
        code_data.stdlib_root()
