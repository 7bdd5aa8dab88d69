"""bench/gpu_check.sh refuses cleanly where torch sees no CUDA GPU (this machine)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the check would run")
def test_gpu_check_refuses_without_a_gpu(tmp_path):
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), str(tmp_path / "out")], capture_output=True,
                          text=True, env={"PY": sys.executable, "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "no CUDA GPU visible" in done.stderr and "nothing was run" in done.stderr
    assert not (tmp_path / "out").exists()
