"""Test-wide settings: hypothesis runs deterministically and without per-example
deadlines, so a loaded CI machine cannot turn a slow example into a failure."""

import sys

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "rlhflab", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("rlhflab")


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """One smoke-preset pipeline run shared by the tests that only read it."""
    from rlhflab.config import load_config
    from rlhflab.pipeline import run_pipeline

    return run_pipeline(load_config("smoke"), tmp_path_factory.mktemp("smoke") / "run", show_progress=False).run


def pytest_terminal_summary(terminalreporter):
    """The documented workflows' counts: commands run, skipped by reason, expected failures."""
    module = sys.modules.get("test_docs_workflows")
    if module is not None and module.TALLY:
        terminalreporter.write_line("documented workflows: " + ", ".join(f"{n} {what}" for what, n in module.TALLY.items()))
        slowest = sorted(module.SECONDS.items(), key=lambda item: -item[1])[:10]
        terminalreporter.write_line("slowest steps: " + "; ".join(f"{step} {seconds:.0f} s" for step, seconds in slowest))
