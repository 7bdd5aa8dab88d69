"""Each planned command checked before anyone runs it: by the trainer's own parser where it
is installed (TRL's HfArgumentParser over its config class; veRL's ppo_trainer.yaml composed
by Hydra, which refuses a key the config does not have), else against the key list stored
with the launcher (doctor/plan.py). Only the settings the plan adds are checked: the rest of
the command is the user's."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rlhflab.doctor.plan import AblationPlan, Launcher, missing_from_key_list, planned_settings


@dataclass
class PlanCheck:
    checked_by: str  # the parser and its version, or the key list and its version
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _flags(settings: list[tuple[str, str]]) -> list[str]:
    return [token for key, value in settings for token in (f"--{key}", value)]


def _trl_parser(config_class: Callable[[], type], name: str) -> Callable[[Launcher, AblationPlan], PlanCheck | None]:
    def check(launcher: Launcher, plan: AblationPlan) -> PlanCheck | None:
        try:
            import trl
            from transformers import HfArgumentParser

            config = config_class()
        except ImportError:
            return None
        result = PlanCheck(f"TRL {trl.__version__}'s HfArgumentParser over {name}")
        parser = HfArgumentParser((config,))
        for arm in plan.arms:
            args = _flags(planned_settings(launcher, plan, arm, plan.seeds[0]))
            try:  # its flags and their types; not the config's __post_init__, which checks this machine's GPU
                _, unknown = parser.parse_known_args(args)
            except (SystemExit, ValueError, TypeError) as err:  # argparse exits on a bad value
                result.errors.append(f"{arm}: {name} refuses {' '.join(args)} ({err})")
                continue
            if unknown:
                result.errors.append(f"{arm}: {name} has no {' '.join(unknown)}")
        return result
    return check


def _grpo_config() -> type:
    from trl import GRPOConfig

    return GRPOConfig


def _ppo_config() -> type:
    from trl.experimental.ppo import PPOConfig  # TRL 1.12; gone after it

    return PPOConfig


def verl_config_dir() -> Path | None:
    """veRL's own config directory, from the installed package's files (nothing of veRL is imported)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    config = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    return config if (config / "ppo_trainer.yaml").is_file() else None


def _verl_hydra(launcher: Launcher, plan: AblationPlan) -> PlanCheck | None:
    config_dir = verl_config_dir()
    try:
        from hydra import compose, initialize_config_dir
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException
    except ImportError:
        return None
    if config_dir is None:
        return None
    from importlib.metadata import version

    result = PlanCheck(f"veRL {version('verl')}'s ppo_trainer.yaml composed by Hydra {version('hydra-core')}")
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        for arm in plan.arms:
            overrides = [f"{k}={v}" for k, v in planned_settings(launcher, plan, arm, plan.seeds[0])]
            try:
                compose(config_name="ppo_trainer", overrides=overrides)
            except (HydraException, OmegaConfBaseException) as err:
                result.errors.append(f"{arm}: {str(err).splitlines()[0]}")
    return result


PARSERS: dict[str, Callable[[Launcher, AblationPlan], PlanCheck | None]] = {
    "trl-grpo": _trl_parser(_grpo_config, "GRPOConfig"),
    "trl-ppo": _trl_parser(_ppo_config, "PPOConfig"),
    "verl": _verl_hydra,
}


def check_plan(launcher: Launcher, plan: AblationPlan) -> PlanCheck:
    """The trainer's own parser where it is installed, else the stored key list (said)."""
    parser = PARSERS.get(launcher.name)
    checked = parser(launcher, plan) if parser is not None else None
    if checked is not None:
        return checked
    missing = missing_from_key_list(launcher, plan)
    how = f"the key list of {launcher.keys.version} ({launcher.keys.source})"
    if parser is not None:
        how += "; its own parser is not installed here"
    return PlanCheck(how, [f"{key} is not in {launcher.keys.version}'s keys" for key in missing])
