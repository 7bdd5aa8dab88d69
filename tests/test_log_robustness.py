"""Bad and odd logs get a diagnosis, a "cannot tell", or an error naming the file: never a
traceback. Every reader is fed random bytes, and the fixtures (and the public real logs,
when present) truncated and mutated."""

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.formats import FORMATS, LogFormatError, read_log

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"
REAL_LOGS = Path(__file__).resolve().parents[2] / "shared" / "real_logs"
FILE_FIXTURES = sorted(p for p in FIXTURES.iterdir() if p.is_file() and p.suffix != ".py" and p.name != "README.md")
REAL = sorted(p for p in REAL_LOGS.glob("*") if p.name != "MANIFEST.md") if REAL_LOGS.is_dir() else []
SUFFIXES = (".json", ".jsonl", ".csv", ".log", ".md", "")
LENIENT = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                           HealthCheck.too_slow])


def read_or_error(path: Path, format_name: str | None = None) -> None:
    """A table and a diagnosis with a verdict, or a LogFormatError that names the file."""
    try:
        table = read_log(path, format_name=format_name)
    except LogFormatError as err:
        assert path.name in str(err), str(err)
        return
    diagnosis = diagnose(table)
    assert diagnosis.verdict in ("finding", "no_finding", "cannot_tell")


@LENIENT
@given(data=st.binary(max_size=3000), suffix=st.sampled_from(SUFFIXES))
def test_random_bytes_under_any_name(tmp_path_factory, data, suffix):
    path = tmp_path_factory.mktemp("bytes") / f"log{suffix}"
    path.write_bytes(data)
    read_or_error(path)


@LENIENT
@given(data=st.binary(max_size=2000), fmt=st.sampled_from([f.name for f in FORMATS]))
def test_random_bytes_forced_through_every_reader(tmp_path_factory, data, fmt):
    path = tmp_path_factory.mktemp("forced") / "log.txt"
    path.write_bytes(data)
    read_or_error(path, format_name=fmt)


def mutate(text: bytes, cut: float, flips: list[tuple[float, int]], line: bytes) -> bytes:
    """`text` truncated at a fraction `cut`, with bytes replaced and a line inserted."""
    out = bytearray(text[: int(len(text) * cut)])
    for where, byte in flips:
        if out:
            out[int(where * (len(out) - 1))] = byte
    middle = out.find(b"\n", len(out) // 2)
    if middle >= 0:
        out[middle:middle] = b"\n" + line
    return bytes(out)


@LENIENT
@pytest.mark.parametrize("source", FILE_FIXTURES + REAL, ids=lambda p: p.name)
@given(cut=st.floats(0, 1), flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=4),
       line=st.binary(max_size=80))
def test_truncated_and_mutated_logs(tmp_path_factory, source, cut, flips, line):
    path = tmp_path_factory.mktemp("mutated") / source.name
    path.write_bytes(mutate(source.read_bytes()[:400_000], cut, flips, line))
    read_or_error(path)


def test_truncated_tensorboard_events_and_broken_mlflow_runs(tmp_path: Path):
    events = next((FIXTURES / "trlx_tensorboard").glob("events.out.tfevents.*"))
    for fraction in (0.0, 0.3, 0.77):
        directory = tmp_path / f"tb{fraction}"
        directory.mkdir()
        (directory / events.name).write_bytes(events.read_bytes()[: int(events.stat().st_size * fraction)])
        read_or_error(directory)
    run = tmp_path / "mlruns"
    shutil.copytree(FIXTURES / "nemo_rl_mlruns", run)
    metric = next(p for p in (run).rglob("metrics/train/reward"))
    metric.write_text(metric.read_text() + "12345 not-a-number 7\n")
    with pytest.raises(LogFormatError, match=r"reward:17: expected 'timestamp value step'"):
        read_log(run)
