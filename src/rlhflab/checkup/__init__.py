"""The checkup: component probes that load a run's models and localise a bug without a
training run (`probes.py`). The doctor reads their verdict from `RUN/checkup.json`."""

from rlhflab.checkup.probes import PROBES, ProbeContext, ProbeResult, run_checkup, run_probes

__all__ = ["PROBES", "ProbeContext", "ProbeResult", "run_checkup", "run_probes"]
