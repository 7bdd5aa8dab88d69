"""The progress table a transformers trainer renders in a notebook, written here with the
format strings of transformers/utils/notebook.py (`html_progress_bar`,
`text_to_html_table`: `.6f` floats, "No Log" cells) and saved the way Jupyter saves a
`display_data` output; as Unsloth's patched callback shows TRL's names (` / ` for `/`)."""

import json
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.formats import detect_format, read_log


def cell(value) -> str:
    return f"{value:.6f}" if isinstance(value, float) else str(value)


def html_table(items: list[list]) -> str:
    """transformers.utils.notebook.text_to_html_table."""
    out = '<table border="1" class="dataframe">\n  <thead>\n <tr style="text-align: left;">\n'
    out += "".join(f"      <th>{col}</th>\n" for col in items[0])
    out += "    </tr>\n  </thead>\n  <tbody>\n"
    for row in items[1:]:
        out += "    <tr>\n" + "".join(f"      <td>{cell(elt)}</td>\n" for elt in row) + "    </tr>\n"
    return out + "  </tbody>\n</table><p>"


def progress(value: int, total: int, label: str) -> str:
    """transformers.utils.notebook.html_progress_bar."""
    return (f"\n    <div>\n      \n      <progress value='{value}' max='{total}' style='width:300px; height:20px; "
            f"vertical-align: middle;'></progress>\n      {label}\n    </div>\n    ")


def notebook(outputs: list[str]) -> str:
    """A saved .ipynb whose cells each hold one display_data output of the tracker's HTML."""
    cells = [{"cell_type": "code", "execution_count": i + 1, "metadata": {}, "source": ["trainer.train()"],
              "outputs": [{"output_type": "display_data", "metadata": {},
                           "data": {"text/html": html.splitlines(keepends=True),
                                    "text/plain": ["<IPython.core.display.HTML object>"]}}]}
             for i, html in enumerate(outputs)]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


UNSLOTH = ["Step", "Training Loss", "reward", "reward_std", "completions / mean_length", "completions / clipped_ratio",
           "kl", "rewards / format_reward / mean", "entropy"]


def unsloth_rows(steps, collapse=False):
    rows = []
    for s in steps:
        entropy = max(0.02, 1.0 - 0.05 * s) if collapse else 1.0
        length = max(2.0, 60.0 - 3.0 * s) if collapse else 60.0
        rows.append([s, 0.0016, 0.2 + 0.01 * s, 0.3, length, 0.05, 0.001 * s, 0.5,
                     entropy if s % 5 else "No Log"])
    return rows


def test_an_unsloth_grpo_table_in_a_saved_notebook_is_read_in_trls_names(tmp_path):
    steps = list(range(1, 31))
    path = tmp_path / "grpo.ipynb"
    path.write_text(notebook([progress(30, 30, "[30/30 12:01, Epoch 1/1]") + html_table([UNSLOTH, *unsloth_rows(
        steps, collapse=True)])]))
    assert detect_format(path).name == "notebook-table"
    table = read_log(path)
    assert table.settings.trainer == "trl-grpo" and table.steps_read == 30
    assert table.get("response/length_mean").values[-1] == 2.0 and len(table.get("policy/entropy")) == 24
    rules = {f.rule for f in diagnose(table).findings}
    assert {"length_collapse", "entropy_collapse"} <= rules


def test_the_stock_table_shows_the_loss_only_and_says_so(tmp_path):
    path = tmp_path / "sft.html"
    path.write_text(progress(50, 50, "[50/50 00:41, Epoch 1/1]") + html_table(
        [["Step", "Training Loss"], *[[10 * i, 2.0 / i] for i in range(1, 6)]]))
    table = read_log(path)
    assert table.format == "notebook-table" and any("training loss only" in n for n in table.notes)
    assert diagnose(table).verdict == "cannot_tell"


def test_an_evaluation_table_keeps_its_columns_apart_as_evaluations(tmp_path):
    header = ["Epoch", "Training Loss", "Validation Loss", "Accuracy"]
    rows = [[1, "No log", 0.594039, 0.61], [2, 0.4512, 0.55, 0.66], [3, 0.39, 0.53, 0.69]]
    path = tmp_path / "eval.html"
    path.write_text(html_table([header, *rows]))
    table = read_log(path)
    assert set(table.evaluation) == {"eval/loss", "eval/accuracy"}
    assert table.get("reward/gold_mean") is None


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(10, 50), resume=st.integers(0, 8), seed=st.integers(0, 2 ** 16))
def test_every_row_is_read_among_other_tables_and_across_a_resume(tmp_path_factory, n, resume, seed):
    """N logged steps; a resumed run renders a second table starting at its checkpoint; the
    notebook also shows a pandas DataFrame (no Step column) and a bar mid-way."""
    rng = random.Random(seed)
    first = list(range(1, n + 1 - resume // 2)) if resume else list(range(1, n + 1))
    outputs = [progress(first[-1], n, f"[{first[-1]}/{n} 01:02 < 00:30, 1.02 it/s, Epoch 0.50/1]")
               + html_table([UNSLOTH, *unsloth_rows(first)])]
    other = html_table([["", "prompt", "answer"], [0, "2+2", "4"], [1, "3+3", "6"]])
    outputs.insert(rng.randrange(len(outputs) + 1), other)
    if resume:
        second = list(range(n - resume + 1, n + 1))
        outputs.append(progress(n, n, f"[{n}/{n} 00:40, Epoch 1/1]") + html_table([UNSLOTH, *unsloth_rows(second)]))
    path = tmp_path_factory.mktemp("nb") / "run.ipynb"
    path.write_text(notebook(outputs))
    table = read_log(path)
    assert table.steps_read == n


def test_a_nan_loss_is_a_value_not_a_missing_cell(tmp_path):
    path = tmp_path / "diverged.html"
    path.write_text(html_table([["Step", "Training Loss", "reward"], *[[10 * i, 0.5, 0.1] for i in range(1, 12)],
                                [120, float("nan"), float("nan")]]))
    table = read_log(path)
    assert table.non_finite  # the diverged row is kept, and the non-finite rule sees it


def markdown_table(items: list[list]) -> str:
    """The rendered progress table as a markdown pipe table (copied, or converted with the
    notebook's HTML tables turned into pipe tables)."""
    lines = ["| " + " | ".join(items[0]) + " |", "|" + "---|" * len(items[0])]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in items[1:]]) + "\n"


def test_a_table_saved_as_markdown_is_read_as_the_html_one(tmp_path):
    rows = unsloth_rows(range(1, 31), collapse=True)
    as_html, as_markdown = tmp_path / "run.html", tmp_path / "run.md"
    as_html.write_text(html_table([UNSLOTH, *rows]))
    as_markdown.write_text("# My GRPO run\n\nSome notes.\n\n" + markdown_table([UNSLOTH, *rows]) + "\nThe end.\n")
    assert detect_format(as_markdown).name == "notebook-table"
    html_log, markdown_log = read_log(as_html), read_log(as_markdown)
    assert set(markdown_log.series) == set(html_log.series)
    for name in html_log.series:
        assert markdown_log.get(name).values == html_log.get(name).values, name
    assert not any("ends inside" in note for note in markdown_log.notes)


def test_a_table_cut_mid_cell_is_read_to_its_last_whole_row_and_said(tmp_path):
    rows = unsloth_rows(range(1, 31), collapse=True)
    whole_html, whole_markdown = html_table([UNSLOTH, *rows]), markdown_table([UNSLOTH, *rows])
    # cut inside the 21st row's third cell: rows 1-20 are whole
    html_cut = whole_html[:whole_html.index(f"<td>{21}</td>") + 40]
    markdown_cut = whole_markdown[:whole_markdown.index("| 21 |") + 14]
    for name, text in (("cut.html", html_cut), ("cut.md", markdown_cut)):
        path = tmp_path / name
        path.write_text(text)
        log = read_log(path)
        assert log.get("response/length_mean").steps[-1] == 20 and log.steps_read == 20, name
        assert any("ends inside a progress table: read to its last whole row (step 20)" in n for n in log.notes), name
