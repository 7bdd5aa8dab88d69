"""Device placement: accelerate's choice, kept where rlhflab is tested."""

import pytest
import torch

from rlhflab import distributed


def test_this_machine_gets_accelerates_device():
    from accelerate import PartialState

    expected = PartialState().device
    assert distributed.default_device() == (expected if expected.type in ("cpu", "cuda") else torch.device("cpu"))


@pytest.mark.parametrize("reported, placed", [("cuda:1", "cuda:1"), ("cpu", "cpu"), ("mps", "cpu"), ("xpu:0", "cpu")])
def test_untested_accelerators_fall_back_to_the_cpu(monkeypatch, reported, placed):
    class Reported:
        device = torch.device(reported)

    monkeypatch.setattr(distributed, "PartialState", Reported)
    assert distributed.default_device() == torch.device(placed)


def test_a_single_process_needs_no_process_group(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cluster = distributed.Cluster.from_environment()
    assert (cluster.rank, cluster.world, cluster.is_main) == (0, 1, True)
    assert not torch.distributed.is_initialized()
