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
    assert (cluster.rank, cluster.world_size, cluster.is_main) == (0, 1, True)
    assert not torch.distributed.is_initialized()


@pytest.mark.parametrize("requested, world, used", [
    (None, 1, "single"), (None, 2, "ddp"), ("single", 2, "ddp"), ("ddp", 1, "single"), ("fsdp2", 1, "single"),
    ("fsdp2", 4, "fsdp2"), ("ddp", 2, "ddp"),
])
def test_the_strategy_a_run_uses_and_records(requested, world, used):
    from rlhflab.config import load_config, resolve_strategy, with_strategy

    assert resolve_strategy(requested, world) == used
    config = load_config("smoke", overrides=[f"distributed.strategy={requested}"] if requested else [])
    assert with_strategy(config, world).distributed.strategy == used


def test_fsdp2_shards_each_transformer_block():
    from rlhflab.models.blocks import repeated_blocks
    from test_models import tiny_gpt2, tiny_llama

    gpt2, llama = tiny_gpt2(), tiny_llama()
    assert repeated_blocks(gpt2) == list(gpt2.transformer.h)
    assert repeated_blocks(llama) == list(llama.model.layers)


def test_one_process_gathers_what_it_has():
    cluster = distributed.Cluster.single()
    rows = torch.arange(6).view(3, 2)
    assert cluster.gather_rows(rows, 3) is rows
    assert cluster.gather_lists(["a", "b"]) == ["a", "b"]
    assert torch.equal(cluster.shard(torch.arange(5)), torch.arange(5))


def test_the_config_names_every_engine_and_only_them():
    import typing

    from rlhflab.config import DistributedConfig
    from rlhflab.engines import ENGINES

    hint = typing.get_type_hints(DistributedConfig)["strategy"]
    literal = next(a for a in typing.get_args(hint) if typing.get_origin(a) is typing.Literal)
    assert set(typing.get_args(literal)) == set(ENGINES)


def test_every_engine_has_the_engine_protocols_methods_and_weighs_a_fraction_by_the_process_count():
    import inspect

    from rlhflab.config import DistributedConfig
    from rlhflab.distributed import Cluster
    from rlhflab.engines import ENGINES, Engine, SingleEngine

    methods = {name for name, _ in inspect.getmembers(Engine, inspect.isfunction)} - {"__init__"}
    for engine in ENGINES.values():
        assert all(callable(getattr(engine, m, None)) for m in methods), engine.name
    # DDP and FSDP2 average the W processes' gradients: a quarter of the minibatch on each of 4 processes
    # is weighted 1, so that the average is the whole minibatch's.
    assert SingleEngine(DistributedConfig(), Cluster(0, 4)).loss_weight(0.25) == 1.0
    assert SingleEngine(DistributedConfig(), Cluster(0, 1)).loss_weight(0.3) == 0.3
