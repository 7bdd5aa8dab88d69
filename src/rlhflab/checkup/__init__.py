"""The checkup: probes of the invariants of every component of PPO-RLHF, run on a run's
own models and components through one real iteration (`probes.py` is the registry). The
doctor reads their verdict from `RUN/checkup.json`."""

from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.probes import PROBES, Checkup, run_checkup, run_probes
from rlhflab.checkup.results import ProbeResult

__all__ = ["PROBES", "Checkup", "ProbeContext", "ProbeResult", "run_checkup", "run_probes"]
