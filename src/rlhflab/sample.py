"""`rlhflab sample`: a local Hugging Face causal LM's responses to a prompt file, written as
a sample file the study and doctor readers take (`{step, prompt, response, ended[, gold]}`
per line), with the sampling settings beside it (`SAMPLES.settings.json`).

The model is any local directory: an rlhflab stage directory, a user's `save_pretrained`
model (safetensors), or a peft LoRA adapter directory (`adapter_config.json`; its base model
is loaded from the path the adapter names, and the adapters merged into it). Sampling is
rlhflab's own (`models/sampling.py`): temperature only, each prompt's response drawn from a
stream of its own seeded by (seed, the prompt's line), so a response does not depend on the
batch it was drawn in; a rerun skips the prompts the file already holds (resume after a kill,
losing at most the batch in flight). `rlhflab sample RUN` samples the run's stage-1 model and
its policy on the run's held-out prompts with the run's own response length and temperature.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from rlhflab.errors import InputError

STEP = 0  # a sample file of one model, not of a run: every response is "step 0"
SETTINGS_SUFFIX = ".settings.json"


class SampleError(InputError):
    """A model, prompt file or sample file that cannot be used: the message says what was expected."""


@dataclass(frozen=True)
class SamplingSettings:
    """How responses are drawn; written beside the samples."""

    temperature: float = 1.0
    max_new_tokens: int = 32
    seed: int = 0
    batch_size: int = 16
    device: str = "auto"  # auto: a GPU where torch sees one, else the CPU


@dataclass(frozen=True)
class Sampled:
    out: Path
    written: int
    already: int  # prompts the file held before this call


def settings_path(out: Path) -> Path:
    return out.with_name(out.name + SETTINGS_SUFFIX)


def load_model(path: Path):
    """(model, tokenizer) of a model directory or a LoRA adapter directory (module docstring)."""
    from rlhflab.models.lm import ModelDirError, load_causal_lm, load_tokenizer

    path = Path(path)
    adapter = path / "adapter_config.json"
    try:
        if adapter.is_file():
            from peft import PeftModel

            base = json.loads(adapter.read_text(encoding="utf-8")).get("base_model_name_or_path") or ""
            if not base or not Path(base).is_dir():
                raise SampleError(f"{adapter}: base_model_name_or_path is {base!r}, not a local model directory; "
                                  "expected the directory the adapters were trained on")
            model = PeftModel.from_pretrained(load_causal_lm(Path(base)), str(path)).merge_and_unload()
            tokenizer_dir = path if any(path.glob("tokenizer*")) else Path(base)
            return model, load_tokenizer(tokenizer_dir)
        return load_causal_lm(path), load_tokenizer(path)
    except ModelDirError as err:
        raise SampleError(str(err)) from None


def written_prompts(out: Path) -> list[str]:
    """The prompts a sample file already holds, in order. A torn last line (a kill mid-write)
    is cut off the file, so that appending goes on from whole records."""
    if not out.is_file():
        return []
    prompts, kept = [], 0
    data = out.read_bytes()
    lines = data.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            kept += len(line) + 1
            continue
        try:
            prompts.append(json.loads(line)["prompt"])
        except (ValueError, KeyError, TypeError):
            if number == len(lines):  # the unfinished last line
                break
            raise SampleError(f"{out}:{number}: not a sample record ({{step, prompt, response}}); "
                              "give another --out") from None
        kept += len(line) + 1
    if kept < len(data):
        with out.open("r+b") as handle:
            handle.truncate(kept)
    return prompts


def _check_settings(out: Path, settings: SamplingSettings, model: str, prompts: str, device: str) -> None:
    """A file being resumed must have been drawn the same way: one file, one way of sampling
    (the batch and the device aside: they do not change what is drawn)."""
    path = settings_path(out)
    wanted = {**asdict(settings), "device": device, "model": model, "prompts": prompts}
    if path.is_file() and out.is_file():
        held = json.loads(path.read_text(encoding="utf-8"))
        differ = sorted(k for k in wanted if k not in ("device", "batch_size") and held.get(k) != wanted[k])
        if differ:
            raise SampleError(f"{out}: drawn with other settings ({', '.join(f'{k} {held.get(k)!r}' for k in differ)}; "
                              f"{path}); give another --out, or the same settings to resume")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(wanted, indent=2) + "\n", encoding="utf-8")


def device_for(settings: SamplingSettings):
    import torch

    if settings.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(settings.device)


def sample_to_file(model, tokenizer, prompts: list[str], out: Path, settings: SamplingSettings, *, model_name: str,
                   prompts_name: str, gold: Callable[[list[str], list[str]], list[float]] | None = None,
                   advance: Callable[[int], None] = lambda n: None) -> Sampled:
    """Responses to `prompts` appended to `out`, skipping the prompts it already holds."""
    import torch

    from rlhflab.data.batching import encode_prompts
    from rlhflab.models.sampling import sample_responses
    from rlhflab.seeding import RowStreams

    device = device_for(settings)
    _check_settings(out, settings, model_name, prompts_name, str(device))
    done = written_prompts(out)
    if done != prompts[:len(done)]:
        raise SampleError(f"{out}: holds other prompts than {prompts_name}'s first {len(done)}; give another --out")
    model = model.to(device).eval()
    advance(len(done))
    with out.open("a", encoding="utf-8") as handle:
        for start in range(len(done), len(prompts), settings.batch_size):
            batch = prompts[start:start + settings.batch_size]
            ids, mask = encode_prompts(tokenizer, batch)
            streams = RowStreams(settings.seed, ("sample",), list(range(start, start + len(batch))))
            with torch.no_grad():
                drawn = sample_responses(model, ids.to(device), mask.to(device), settings.max_new_tokens,
                                         settings.temperature, tokenizer.eos_token_id, tokenizer.pad_token_id, streams)
            texts = [tokenizer.decode(row[m].tolist(), skip_special_tokens=True)
                     for row, m in zip(drawn.response_ids.cpu(), drawn.mask.cpu())]
            scores = gold(batch, texts) if gold is not None else [None] * len(batch)
            for prompt, text, ended, score in zip(batch, texts, drawn.has_eos.tolist(), scores):
                record = {"step": STEP, "prompt": prompt, "response": text, "ended": bool(ended)}
                if score is not None:
                    record["gold"] = float(score)
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()  # a kill loses at most the batch in flight
            advance(len(batch))
    return Sampled(out, len(prompts) - len(done), len(done))


def prompts_from_file(path: Path, tokenizer) -> list[str]:
    """A prompt file's prompts (data/files.py: `prompt` strings or messages through the chat template)."""
    from rlhflab.data.files import DataError, load_prompts

    try:
        return [r.prompt for r in load_prompts(path, tokenizer=tokenizer).records]
    except (DataError, OSError) as err:
        raise SampleError(str(err)) from None


def run_sampling(run: Path):
    """(models, prompts, settings, gold) for `rlhflab sample RUN`: the run's stage-1 model and
    policy, its held-out prompts, its response length and temperature, and the world's gold
    where the run is of the world."""
    from rlhflab.config import config_from_run
    from rlhflab.models.lm import load_tokenizer
    from rlhflab.runs import RunDir
    from rlhflab.sources import context_length, prompt_task

    config = config_from_run(Path(run))
    run_dir = RunDir(Path(run))
    models = {name: path for name, path in (("stage1", run_dir.stage1_lm), ("policy", run_dir.stage3_policy))
              if path.is_dir()}
    if not models:
        raise SampleError(f"{run}: no stage1_lm or stage3_policy to sample; expected a run directory")
    first = next(iter(models.values()))
    task = prompt_task(config, load_tokenizer(first), context_length(first, config))
    settings = SamplingSettings(temperature=config.ppo.temperature, max_new_tokens=config.ppo.response_length,
                                seed=config.seed)
    return models, task.eval_prompts, settings, task.gold


def sampled_sources(sources: list, prompts: Path | None, study: Path, sample: Callable[..., None]) -> list:
    """Each source of a study as a sample file: a run's policy sampled on its held-out
    prompts (once, RUN/samples/policy.jsonl), or on `prompts` when given (every system on
    the same prompts, STUDY/samples/NAME.jsonl); a model directory on `prompts`; a sample
    file as it is. `sample(model, tokenizer, texts, target, settings, model_name,
    prompts_name, gold)` writes one file (the command line shows its progress). A source
    that cannot be sampled is a StudyError."""
    from rlhflab.runs import RunDir
    from rlhflab.studies.build import Source
    from rlhflab.studies.design import StudyError

    out = []
    for source in sources:
        is_run = RunDir(source.path).config.is_file()
        if not (is_run or (source.path / "config.json").is_file() or (source.path / "adapter_config.json").is_file()):
            out.append(source)
            continue
        try:
            if is_run:
                models, texts, settings, gold = run_sampling(source.path)
                if "policy" not in models:
                    raise SampleError(f"{source.path}: no stage3_policy to compare")
                model_dir = models["policy"]
                if prompts is None:
                    target, prompts_name = source.path / "samples" / "policy.jsonl", "the run's held-out prompts"
                else:  # every system on the same prompts: the run's policy with its own settings
                    target, prompts_name = study / "samples" / f"{source.name}.jsonl", str(prompts)
            else:
                if prompts is None:
                    raise SampleError(f"{source.path} is a model directory: give --prompts FILE to sample it on")
                settings, gold, model_dir = SamplingSettings(), None, source.path
                target, prompts_name = study / "samples" / f"{source.name}.jsonl", str(prompts)
            model, tokenizer = load_model(model_dir)
            if prompts is not None:
                texts = prompts_from_file(prompts, tokenizer)
            sample(model, tokenizer, texts, target, settings, str(model_dir), prompts_name, gold)
        except SampleError as err:
            raise StudyError(str(err)) from None
        out.append(Source(source.name, target))
    return out

