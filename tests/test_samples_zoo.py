"""rlhflab runs of the zoo, read through their samples: what a rule says of a run, its
sample file must show too, measured from the text alone (doctor/sample_measures.py) and
not from the metrics the rule read.

- narrow_prompts (smoke, default suite): `prompts_narrow` reads the logged
  `prompts/unique_frac`; the samples at its onset hold one prompt.
- kl_coef_zero (demo, slow): the run over-optimises a reward model that likes positive
  words (docs/faults.md); its samples lose their pooled word diversity, grow longer and
  repeat words; from the hacking finding's onset the responses the proxy rates highest
  have lost the gold they had at the start, and the proxy's correlation with gold over a
  step's responses falls from about 0.7 to near 0. The healthy seed's samples show none of
  it. No template lock-in: its answers vary their openings, and the rule stays silent.
"""

from __future__ import annotations

from statistics import mean

import pytest

from rlhflab.config import load_config
from rlhflab.doctor.diagnose import read_and_diagnose
from rlhflab.doctor.sample_measures import samples_at
from rlhflab.doctor.signals import baseline, smooth, window
from rlhflab.faults.zoo import components_for, with_fault
from rlhflab.pipeline import run_pipeline
from rlhflab.runs import RunDir
from rlhflab.verify import rerun


def fault_run(preset: str, fault: str, base: RunDir, out) -> RunDir:
    config = with_fault(load_config(preset), fault)
    run = RunDir(out)
    rerun(config, base, run, "ppo", components_for(config), show_progress=False)
    return run


def start_and_end(table, name: str) -> tuple[float, float]:
    series = table.get(name, any_unit=True)
    w = window(len(series))
    return baseline(series.values, w), smooth(series.values, w)[-1]


def test_narrow_prompts_samples_hold_one_prompt_at_the_findings_onset(smoke_run, tmp_path):
    run = fault_run("smoke", "narrow_prompts", smoke_run, tmp_path / "narrow")
    table, diagnosis = read_and_diagnose(run.root)
    finding = next(f for f in diagnosis.findings if f.rule == "prompts_narrow")
    at = samples_at(table.samples, finding.onset_step)
    prompts = {s.prompt for s in table.samples[0].samples if s.step == at.step}
    assert at.count == load_config("smoke").ppo.batch_size and len(prompts) == 1
    healthy = read_and_diagnose(smoke_run.root)[0]
    assert len({s.prompt for s in healthy.samples[0].samples if s.step == at.step}) > at.count // 2


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo-demo")
    healthy = run_pipeline(load_config("demo"), root / "healthy", show_progress=False).run
    return healthy, fault_run("demo", "kl_coef_zero", healthy, root / "kl_coef_zero")


@pytest.mark.slow
def test_kl_coef_zero_samples_show_the_hacking_the_rules_report(demo_runs):
    healthy, hacked = demo_runs
    table, diagnosis = read_and_diagnose(hacked.root)
    rules = {f.rule: f for f in diagnosis.findings}
    assert {"reward_hacking_gold", "diversity_collapse"} <= set(rules) and "template_lock_in" not in rules
    d1_start, d1_end = start_and_end(table, "text/distinct_1")
    length_start, length_end = start_and_end(table, "text/length_words")
    rep_start, rep_end = start_and_end(table, "text/repetition")
    assert d1_end < 0.6 * d1_start and length_end > 1.4 * length_start and rep_end > rep_start + 0.03
    # From the onset on, the responses the proxy rates highest are no longer the good ones.
    first, onset = samples_at(table.samples, 0, k=8), samples_at(table.samples, rules["reward_hacking_gold"].onset_step, k=8)
    assert mean(s.reward for s in onset.highest) > mean(s.reward for s in first.highest)
    assert mean(s.gold for s in onset.highest) < mean(s.gold for s in first.highest) - 0.5
    corr_start, corr_end = start_and_end(table, "text/reward_gold_corr")
    assert corr_start > 0.5 and corr_end < 0.3
    calm = read_and_diagnose(healthy.root)[0]
    d1_start, d1_end = start_and_end(calm, "text/distinct_1")
    length_start, length_end = start_and_end(calm, "text/length_words")
    assert d1_end > 0.8 * d1_start and length_end < 1.2 * length_start
    assert min(smooth(calm.get("text/reward_gold_corr").values, 5)) > 0.5
    assert max(calm.get("text/opening_share").values) < 0.16


def test_the_live_doctor_reads_the_samples_and_stops_on_template_lock_in():
    """`ppo.stop_on=template_lock_in`: the live doctor measures the rows each iteration
    keeps, as the doctor reads samples/ppo.jsonl afterwards."""
    from types import SimpleNamespace

    from rlhflab.ppo.run import LiveDoctor

    config = load_config("smoke", overrides=["ppo.stop_on=template_lock_in", "ppo.doctor_every=5"])
    state = SimpleNamespace(reward=SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(to_dict=dict))))
    watch = LiveDoctor(config, state)
    stopped = None
    for step in range(40):
        metrics = {"reward/proxy_mean": 0.01 * step, "kl/mean": 0.1, "policy/entropy": 2.0}
        rows = [{"step": step, "prompt": f"p{i}", "proxy": 0.0, "ended": True,
                 "response": "it was absolutely great" if step >= 12 and i < 24 else f"the plot {i} had {step} turns"}
                for i in range(32)]
        stopped = watch.observe(step, metrics, rows)
        if stopped is not None:
            break
    assert stopped is not None and stopped.rule == "template_lock_in" and 12 <= step < 30
