"""The doctor: pure log analysis. It reads a metrics log (an rlhflab run or another
trainer's), runs its rules, and says what went wrong, why, and how to fix it.

It imports no torch, transformers or pipeline module (a test checks), so it starts fast
and installs light: `pip install rlhflab` is enough to diagnose a log.

This module is its one front door: code outside `rlhflab.doctor` imports only the names
in `__all__` (tests/test_architecture.py holds it to that).
"""

from rlhflab.doctor.ablate_report import write_ablation_report
from rlhflab.doctor.arms import (
    Arm,
    Ranking,
    arm_names,
    candidate_fixes,
    choose_seeds,
    describe,
    observed_arm,
    rank_arms,
    serious,
    truth_metric,
)
from rlhflab.doctor.compare import CONFIDENCE, Comparison, TruthChange, compare_tables, end_values
from rlhflab.doctor.compare_report import write_compare_report
from rlhflab.doctor.diagnose import (
    CHECKUP_RULE,
    diagnose,
    diagnose_path,
    diagnosis_json,
    read_and_diagnose,
    write_diagnosis,
)
from rlhflab.doctor.errors import LogFormatError
from rlhflab.doctor.findings import Cause, Change, Component, Diagnosis, Finding, Fix
from rlhflab.doctor.follow import follow
from rlhflab.doctor.formats import DIALECTS, FORMATS, read_log, render_change, verify_command
from rlhflab.doctor.formats import rlhflab as rlhflab_format
from rlhflab.doctor.formats.mapping import parse_map_options
from rlhflab.doctor.formats.sample_files import CALLBACK_SAMPLES, SAMPLE_FORMATS, read_samples
from rlhflab.doctor.live import LiveLog, StopRule, Watch, finding_line, stop_rules
from rlhflab.doctor.plan import LAUNCHERS_BY_DIALECT, PlanError, plan_for_log
from rlhflab.doctor.plan_check import check_plan
from rlhflab.doctor.report import write_report
from rlhflab.doctor.ruledoc import write_rules_doc
from rlhflab.doctor.rules import THRESHOLDS
from rlhflab.doctor.samples import Sample
from rlhflab.doctor.settings import RunSettings
from rlhflab.doctor.table import MetricTable
from rlhflab.doctor.truth import RatedExample, RatedPoint, RatedTruth, attach_truth

RLHFLAB_DIALECT = rlhflab_format.DIALECT

__all__ = [
    # reading a log and diagnosing it
    "CHECKUP_RULE", "DIALECTS", "FORMATS", "LogFormatError", "MetricTable", "RunSettings", "SAMPLE_FORMATS", "Sample",
    "diagnose", "diagnose_path", "diagnosis_json", "parse_map_options", "read_and_diagnose", "read_log",
    "read_samples", "write_diagnosis",
    # the finding types, the components they blame, the fixes in each trainer's keys
    "Cause", "Change", "Component", "Diagnosis", "Finding", "Fix", "RLHFLAB_DIALECT", "THRESHOLDS", "render_change",
    "verify_command",
    # the live log and the watch
    "CALLBACK_SAMPLES", "LiveLog", "StopRule", "Watch", "finding_line", "follow", "stop_rules",
    # the report, the comparison, the ablation's ranking and another trainer's plan
    "Arm", "CONFIDENCE", "arm_names", "Comparison", "LAUNCHERS_BY_DIALECT", "PlanError", "Ranking", "TruthChange",
    "candidate_fixes", "check_plan", "choose_seeds", "compare_tables", "describe", "end_values", "observed_arm",
    "plan_for_log", "rank_arms", "serious", "truth_metric", "write_ablation_report", "write_compare_report",
    "write_report", "write_rules_doc",
    # a truth measured by people
    "RatedExample", "RatedPoint", "RatedTruth", "attach_truth",
]
