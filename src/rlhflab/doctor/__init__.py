"""The doctor: pure log analysis. It reads a metrics log (an rlhflab run or another
trainer's), runs its rules, and says what went wrong, why, and how to fix it.

It imports no torch, transformers or pipeline module (a test checks), so it starts fast
and installs light: `pip install rlhflab` is enough to diagnose a log.
"""

from rlhflab.doctor.diagnose import diagnose, diagnose_path, diagnosis_json
from rlhflab.doctor.formats import LogFormatError, read_log

__all__ = ["LogFormatError", "diagnose", "diagnose_path", "diagnosis_json", "read_log"]
