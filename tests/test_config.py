import dataclasses
from pathlib import Path

import pytest

from rlhflab.config import (
    ConfigError,
    PipelineConfig,
    apply_overrides,
    config_from_run,
    load_config,
    read_toml,
    save_config,
    to_toml,
)


def test_defaults_are_the_demo_preset():
    assert load_config("demo") == PipelineConfig()


def test_dotted_overrides_are_coerced_to_field_types():
    config = load_config("demo", overrides=["ppo.kl_coef=0.02", "ppo.iterations=7", "seed=3", "ppo.whiten_advantages=false"])
    assert config.ppo.kl_coef == 0.02 and config.ppo.iterations == 7 and config.seed == 3
    assert config.ppo.whiten_advantages is False
    assert config.pretrain == PipelineConfig().pretrain  # other sections untouched


def test_optional_and_literal_fields():
    config = load_config("demo", overrides=["ppo.kl_target=6", "ppo.kl_estimator=k3"])
    assert config.ppo.kl_target == 6.0 and config.ppo.kl_estimator == "k3"
    assert load_config("demo", overrides=["ppo.kl_target=none"]).ppo.kl_target is None
    with pytest.raises(ConfigError, match="ppo.kl_estimator.*expected one of 'k1', 'k2', 'k3'"):
        load_config("demo", overrides=["ppo.kl_estimator=k9"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("ppo.kl_cof=0.1", "unknown config key 'ppo.kl_cof'.*ppo.kl_coef"),
        ("pop.kl_coef=0.1", "unknown config key 'pop.kl_coef'"),
        ("ppo.iterations=ten", "ppo.iterations = 'ten': expected an integer"),
        ("ppo.iterations=0", "ppo.iterations = 0: expected a value > 0"),
        ("ppo.kl_coef=-1", "ppo.kl_coef = -1.0: expected a value >= 0"),
        ("ppo.gamma=1.5", r"ppo.gamma = 1.5: expected a value in \[0.0, 1.0\]"),
        ("ppo.lr=nan", "expected a finite number"),
        ("ppo.minibatches=5", "must be divisible"),
        ("ppo.kl_coef", "expected key=value"),
    ],
)
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("demo", overrides=[override])


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset 'huge'"):
        load_config("huge")


def test_toml_file_errors_name_the_file(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[ppo]\nkl_coef = 0.1\nclip = 0.3\n")
    with pytest.raises(ConfigError, match=r"bad.toml: unknown config key 'ppo.clip'"):
        load_config("demo", bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("[ppo\n")
    with pytest.raises(ConfigError, match=r"broken.toml: invalid TOML.*line 1"):
        read_toml(broken)
    with pytest.raises(ConfigError, match="config file not found"):
        read_toml(tmp_path / "missing.toml")


def test_file_then_overrides_precedence(tmp_path: Path):
    path = tmp_path / "c.toml"
    path.write_text("seed = 5\n[ppo]\nkl_coef = 0.3\nclip_eps = 0.1\n")
    config = load_config("smoke", path, ["ppo.kl_coef=0.4"])
    assert config.seed == 5 and config.ppo.clip_eps == 0.1 and config.ppo.kl_coef == 0.4
    assert config.ppo.iterations == load_config("smoke").ppo.iterations


def test_resolved_config_round_trips_with_every_default(tmp_path: Path):
    config = load_config("smoke", overrides=["ppo.kl_target=4.5", "world.labeler_tau=0.2"])
    save_config(config, tmp_path / "config.toml")
    assert config_from_run(tmp_path) == config
    unset = to_toml(load_config("demo"))
    assert "# kl_target is unset" in unset
    # Every field of every section is written out.
    for section in ("pretrain", "reward", "ppo", "world"):
        for name in getattr(PipelineConfig(), section).__dataclass_fields__:
            assert f"{name} = " in unset or f"# {name} is unset" in unset


def test_config_objects_are_frozen():
    config = PipelineConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.ppo.kl_coef = 1.0  # type: ignore[misc]
    assert apply_overrides(config, {"ppo.kl_coef": 1.0}).ppo.kl_coef == 1.0
    assert config.ppo.kl_coef == PipelineConfig().ppo.kl_coef
