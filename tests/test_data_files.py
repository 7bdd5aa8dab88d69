"""Data-file loading: every kind of bad input names file:line, the field and what was
expected; skip_invalid keeps the good records; JSONL and Parquet read alike; the
conversational preference form is rendered with a chat template built in the test."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rlhflab.data.files import (
    DataError,
    Loaded,
    PreferenceRecord,
    PromptRecord,
    SFTRecord,
    Skipped,
    load_preferences,
    load_prompts,
    load_sft,
)

# Renders [user: "hi"] with a generation prompt as "<user> hi <assistant>".
CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def write_jsonl(path, rows):
    """One line per row: dicts as JSON, str and bytes written verbatim."""
    lines = [r if isinstance(r, bytes) else (r if isinstance(r, str) else json.dumps(r)).encode() for r in rows]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def word_tokenizer(chat_template=None):
    """Whitespace word tokenizer: one token per word, so token counts are word counts."""
    core = Tokenizer(models.WordLevel(vocab={"<unk>": 0, "hi": 1}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>")
    if chat_template is not None:
        tok.chat_template = chat_template
    return tok


@pytest.fixture(scope="module")
def chat_tok():
    return word_tokenizer(CHAT_TEMPLATE)


def error_of(load, path, **kwargs) -> str:
    with pytest.raises(DataError) as info:
        load(path, **kwargs)
    return str(info.value)


PREF = {"prompt": "p", "chosen": "good", "rejected": "bad"}


# --- both formats, good input ---------------------------------------------------------


@pytest.mark.parametrize("write, name", [(write_jsonl, "d.jsonl"), (write_parquet, "d.parquet")])
def test_both_formats_load_all_three_kinds(tmp_path, write, name):
    rows = [{"prompt": "a", "completion": "b", "chosen": "c", "rejected": "d", "extra": 1}] * 2
    path = write(tmp_path / name, rows)
    assert load_prompts(path).records == (PromptRecord("a", 1), PromptRecord("a", 2))
    assert load_sft(path).records == (SFTRecord("a", "b", 1), SFTRecord("a", "b", 2))
    loaded = load_preferences(str(path))
    assert loaded == Loaded(path, (PreferenceRecord("a", "c", "d", 1), PreferenceRecord("a", "c", "d", 2)), ())
    assert loaded.summary() == f"{path}: 2 records"


def test_jsonl_lines_count_blank_lines_and_keep_text_as_written(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": " a "}\r\n\n   \n{"prompt": "b"}')  # BOM, CRLF, no final newline
    assert load_prompts(path).records == (PromptRecord(" a ", 1), PromptRecord("b", 4))


# --- file-level errors ---------------------------------------------------------------


def test_unsupported_extension_names_accepted_ones(tmp_path):
    path = write_jsonl(tmp_path / "prompts.json", [{"prompt": "a"}])
    msg = error_of(load_prompts, path)
    assert "prompts.json" in msg and "'.json'" in msg and ".jsonl, .parquet" in msg


def test_missing_file_is_an_error_even_when_skipping(tmp_path):
    msg = error_of(load_prompts, tmp_path / "nope.jsonl", skip_invalid=True)
    assert "nope.jsonl" in msg and "file not found" in msg


def test_empty_jsonl_is_an_error_even_when_skipping(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n")
    msg = error_of(load_sft, path, skip_invalid=True)
    assert "empty.jsonl: file is empty" in msg


def test_empty_parquet_is_an_error(tmp_path):
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"prompt": pa.array([], pa.string())}), path)
    assert "empty.parquet: file is empty" in error_of(load_prompts, path)


def test_unreadable_parquet_is_an_error(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_text('{"prompt": "a"}\n')
    msg = error_of(load_prompts, path)
    assert "bad.parquet" in msg and "not a readable Parquet file" in msg


# --- record-level errors -------------------------------------------------------------


def test_invalid_json_names_line_and_json_error(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a"}, "", '{"prompt": "b",}'])
    msg = error_of(load_prompts, path)
    assert msg.startswith(f"{path}:3: not valid JSON (Expecting property name")
    assert "expected one JSON object per line" in msg


def test_json_that_is_not_an_object(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a"}, '["a"]'])
    assert error_of(load_prompts, path).startswith(f"{path}:2: the line is a list, not a JSON object")


def test_non_utf8_byte_names_line_and_offset(tmp_path):
    # Line 2 holds a valid two-byte "é". On line 3, `{"prompt": "ab` is 14 bytes
    # (offsets 0-13), so 0xff sits at offset 14.
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a"}, '{"prompt": "é"}', b'{"prompt": "ab\xff"}'])
    msg = error_of(load_prompts, path)
    assert msg == f"{path}:3: invalid UTF-8 byte 0xff at byte offset 14; expected UTF-8 text"


def test_missing_field(tmp_path):
    path = write_jsonl(tmp_path / "s.jsonl", [{"prompt": "a", "completion": "b"}, {"prompt": "a"}])
    assert error_of(load_sft, path) == f"{path}:2: missing field 'completion'; expected a non-empty string"


@pytest.mark.parametrize("value, kind", [(3, "a number"), (None, "null"), (True, "a boolean"), ({}, "an object")])
def test_wrong_type(tmp_path, value, kind):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": value}])
    assert error_of(load_prompts, path) == f"{path}:1: field 'prompt' is {kind}; expected a non-empty string"


def test_wrong_type_in_parquet_names_row(tmp_path):
    path = write_parquet(tmp_path / "s.parquet", [{"prompt": "a", "completion": 1}, {"prompt": "b", "completion": 2}])
    assert error_of(load_sft, path).startswith(f"{path}:1: field 'completion' is a number; expected")


def test_null_in_parquet_names_row(tmp_path):
    path = write_parquet(tmp_path / "p.parquet", [{"prompt": "a"}, {"prompt": "b"}, {"prompt": None}])
    assert error_of(load_prompts, path).startswith(f"{path}:3: field 'prompt' is null")


@pytest.mark.parametrize("value", ["", "  \n\t"])
def test_empty_or_whitespace_string(tmp_path, value):
    path = write_jsonl(tmp_path / "s.jsonl", [{"prompt": "a", "completion": value}])
    assert error_of(load_sft, path) == f"{path}:1: field 'completion' is empty; expected a non-empty string"


def test_chosen_equal_to_rejected_after_strip(tmp_path):
    path = write_jsonl(tmp_path / "prefs.jsonl", [PREF, {"prompt": "p", "chosen": "same ", "rejected": " same"}])
    msg = error_of(load_preferences, path)
    assert msg == f"{path}:2: chosen and rejected are the same response; expected two different responses"


def test_preference_wrong_type_mentions_both_forms(tmp_path):
    path = write_jsonl(tmp_path / "prefs.jsonl", [{"prompt": "p", "chosen": 1, "rejected": "b"}])
    assert "field 'chosen' is a number; expected a non-empty string or a list of messages" in error_of(
        load_preferences, path
    )


# --- token limit ---------------------------------------------------------------------


def test_prompt_over_token_limit(tmp_path, chat_tok):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "one two"}, {"prompt": "one two three four"}])
    msg = error_of(load_prompts, path, tokenizer=chat_tok, max_tokens=3)
    assert msg.startswith(f"{path}:2: prompt is 4 tokens, over the limit of 3")


def test_sft_counts_prompt_plus_completion(tmp_path, chat_tok):
    path = write_jsonl(tmp_path / "s.jsonl", [{"prompt": "one two", "completion": "three four"}])
    assert len(load_sft(path, tokenizer=chat_tok, max_tokens=4).records) == 1  # exactly at the limit is fine
    msg = error_of(load_sft, path, tokenizer=chat_tok, max_tokens=3)
    assert msg == f"{path}:1: prompt + completion is 4 tokens, over the limit of 3; expected at most 3 tokens"


def test_preference_limit_checks_the_longer_response(tmp_path, chat_tok):
    path = write_jsonl(tmp_path / "prefs.jsonl", [{"prompt": "p", "chosen": "a", "rejected": "b c d"}])
    msg = error_of(load_preferences, path, tokenizer=chat_tok, max_tokens=3)
    assert msg.startswith(f"{path}:1: prompt + rejected is 4 tokens, over the limit of 3")


def test_limit_without_tokenizer_is_a_caller_error(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a"}])
    with pytest.raises(ValueError, match="needs a tokenizer"):
        load_prompts(path, max_tokens=3)


# --- skip_invalid --------------------------------------------------------------------


def test_skip_invalid_lists_skipped_lines_and_reasons(tmp_path):
    rows = [PREF, '{"prompt":', PREF, {"prompt": "p", "chosen": "x", "rejected": "x"}, "", {"prompt": "p"}, PREF]
    path = write_jsonl(tmp_path / "prefs.jsonl", rows)
    loaded = load_preferences(path, skip_invalid=True)
    assert [r.line for r in loaded.records] == [1, 3, 7]
    assert [s.line for s in loaded.skipped] == [2, 4, 6]
    assert loaded.skipped[2] == Skipped(6, "missing field 'chosen'; expected a non-empty string or a list of messages")
    assert loaded.summary() == f"{path}: 3 records, 3 skipped (lines 2, 4, 6)"


def test_summary_lists_at_most_ten_lines(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": ""}] * 12 + [{"prompt": "a"}])
    summary = load_prompts(path, skip_invalid=True).summary()
    assert summary == f"{path}: 1 record, 12 skipped (lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ...)"


def test_all_invalid_is_an_error_even_when_skipping(tmp_path):
    path = write_parquet(tmp_path / "p.parquet", [{"prompt": " "}, {"prompt": ""}, {"prompt": None}])
    msg = error_of(load_prompts, path, skip_invalid=True)
    assert "p.parquet: no valid records, all 3 lines skipped (first, line 1: field 'prompt' is empty" in msg


# --- conversational preferences ------------------------------------------------------


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def test_conversational_implicit_prompt_is_the_shared_messages(tmp_path, chat_tok):
    row = {"chosen": [user("hi"), assistant("hello there")], "rejected": [user("hi"), assistant("go away")]}
    path = write_jsonl(tmp_path / "prefs.jsonl", [row])
    rec = load_preferences(path, tokenizer=chat_tok).records[0]
    assert rec == PreferenceRecord("<user> hi <assistant>", "hello there", "go away", 1)


def test_conversational_explicit_prompt_in_parquet(tmp_path, chat_tok):
    sys = {"role": "system", "content": "be kind"}
    row = {"prompt": [sys, user("hi")], "chosen": [assistant("hello")], "rejected": [assistant("no")]}
    path = write_parquet(tmp_path / "prefs.parquet", [row])
    rec = load_preferences(path, tokenizer=chat_tok).records[0]
    assert rec == PreferenceRecord("<system> be kind <user> hi <assistant>", "hello", "no", 1)


def test_conversational_token_limit_counts_the_rendered_prompt(tmp_path, chat_tok):
    row = {"chosen": [user("hi"), assistant("a b")], "rejected": [user("hi"), assistant("c")]}
    path = write_jsonl(tmp_path / "prefs.jsonl", [row])
    # "<user> hi <assistant>" is 3 words, so prompt + chosen is 5 tokens
    assert error_of(load_preferences, path, tokenizer=chat_tok, max_tokens=4).startswith(
        f"{path}:1: prompt + chosen is 5 tokens, over the limit of 4"
    )


@pytest.mark.parametrize("tokenizer", [None, word_tokenizer()], ids=["no tokenizer", "no template"])
def test_conversational_needs_a_chat_template_even_when_skipping(tmp_path, tokenizer):
    row = {"chosen": [user("hi"), assistant("a")], "rejected": [user("hi"), assistant("b")]}
    path = write_jsonl(tmp_path / "prefs.jsonl", [PREF, row])
    msg = error_of(load_preferences, path, tokenizer=tokenizer, skip_invalid=True)
    assert msg.startswith(f"{path}:2: conversational records need a tokenizer with a chat template; expected")


@pytest.mark.parametrize(
    "row, problem",
    [
        ({"chosen": [user("hi"), assistant("a")], "rejected": [user("yo"), assistant("b")]},
         "chosen and rejected differ before their last message"),
        ({"chosen": [user("hi"), user("a")], "rejected": [user("hi"), assistant("b")]},
         "the last message of 'chosen' has role 'user'"),
        ({"chosen": [assistant("a")], "rejected": [assistant("b")]}, "no prompt messages"),
        ({"chosen": [user("hi"), assistant("a")], "rejected": []}, "field 'rejected' is empty"),
        ({"chosen": [user("hi"), assistant("a")], "rejected": "b"}, "field 'rejected' is a string"),
        ({"chosen": [user("hi"), {"role": "assistant"}], "rejected": [user("hi"), assistant("b")]},
         "message 2 of 'chosen' has content null"),
        ({"prompt": "hi", "chosen": [assistant("a")], "rejected": [assistant("b")]}, "field 'prompt' is a string"),
        ({"chosen": [user("hi"), assistant(" a")], "rejected": [user("hi"), assistant("a ")]},
         "chosen and rejected are the same response"),
    ],
)
def test_conversational_structure_errors(tmp_path, chat_tok, row, problem):
    path = write_jsonl(tmp_path / "prefs.jsonl", [row])
    assert error_of(load_preferences, path, tokenizer=chat_tok).startswith(f"{path}:1: {problem}; expected")
