"""How tests/doc_steps.py reads a page: which lines are steps, what their marks say, and the
marks it refuses. Pages written here, read as the documented workflows' test reads the docs."""

from __future__ import annotations

from pathlib import Path

import pytest

from doc_steps import SKIP_REASONS, DocStepError, document_steps, promised_words, split_comment

ROOT = Path(__file__).resolve().parents[1]


def page(tmp_path: Path, text: str) -> list:
    path = tmp_path / "docs" / "page.md"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return document_steps(path, tmp_path)


def test_a_new_command_runs_by_default_with_exit_0(tmp_path):
    (step,) = page(tmp_path, "Intro.\n\n```sh\nrlhflab doctor runs/demo   # findings\n```\n")
    assert (step.command, step.line, step.skip, step.slow, step.exit_code) == ("rlhflab doctor runs/demo", 4, None,
                                                                                False, 0)
    assert step.where == "docs/page.md:4"


def test_only_rlhflab_and_make_lines_of_shell_blocks_are_steps(tmp_path):
    steps = page(tmp_path, "```sh\npip install rlhflab\n# rlhflab doctor RUN\nmake demo\nsh plan.sh\n"
                           "torchrun --nproc_per_node=2 -m rlhflab.cli pipeline   # [needs torchrun]\n```\n"
                           "```text\nrlhflab pipeline [--preset P]\n```\n"
                           "```bash\n.venv-vllm/bin/rlhflab ppo   # [needs .venv-vllm]\n"
                           "python - <<'EOF'\nrlhflab = 1\nEOF\n```\n")
    assert [s.command.split()[0] for s in steps] == ["make", "torchrun", ".venv-vllm/bin/rlhflab"]
    assert [s.skip for s in steps] == [None, SKIP_REASONS["needs torchrun"], SKIP_REASONS["needs .venv-vllm"]]


def test_continued_lines_are_one_command_and_a_quoted_hash_is_no_comment(tmp_path):
    (step,) = page(tmp_path, '```sh\nrlhflab doctor out --plan --command "trl grpo \\\n    --beta 0.0 # not a comment" '
                             '> plan.sh   # [needs your files] [exit 1]\n```\n')
    assert step.command == 'rlhflab doctor out --plan --command "trl grpo --beta 0.0 # not a comment" > plan.sh'
    assert step.skip == SKIP_REASONS["needs your files"] and step.exit_code == 1


def test_quoted_output_is_promised_up_to_its_first_number():
    assert promised_words("after preferred in 64% [55%, 72%] ...") == "after preferred in"
    assert promised_words("no setting cures it ...") == "no setting cures it"
    assert split_comment('rlhflab compare a -- b   # "after preferred in 64%"') == (
        "rlhflab compare a -- b", '"after preferred in 64%"')


def test_slow_commands_are_marked_not_skipped(tmp_path):
    (step,) = page(tmp_path, "```sh\nrlhflab faults bench   # ~20 min [slow]\n```\n")
    assert step.slow and step.skip is None


def test_an_unknown_mark_is_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(DocStepError, match=r"docs/page.md:2: \[needs a quiet room\] is not a known mark"):
        page(tmp_path, "```sh\nrlhflab checkup runs/demo   # [needs a quiet room]\n```\n")


def test_an_expected_failure_names_its_issue_and_applies_to_the_next_block_only(tmp_path):
    steps = page(tmp_path, "<!-- workflow-test: expected to fail until #59: rlhflab compare a -->\n"
                           "```sh\nrlhflab verify a --fix k=v\nrlhflab compare a -- b\n```\n"
                           "```sh\nrlhflab compare a -- c\n```\n")
    assert [s.expected_failure for s in steps] == [None, 59, None]


def test_an_expected_failure_that_matches_nothing_is_refused(tmp_path):
    with pytest.raises(DocStepError, match="matches no command"):
        page(tmp_path, "<!-- workflow-test: expected to fail until #59: rlhflab gone -->\n```sh\nrlhflab here\n```\n")


def test_every_page_of_this_repository_reads():
    from doc_steps import workflow_documents

    steps = [s for d in workflow_documents(ROOT) for s in document_steps(d, ROOT)]
    assert steps[0].command == "make demo" and steps[0].document == "README.md"  # where a user starts
    assert sum(not s.skip for s in steps) >= 40
