"""The user's own files made into what the stages read: the held-out split of a file (apart
from its training rows, at the fraction asked, the same for the same seed) and the user's
preference pairs as comparison rows (the prompt, then the chosen response first)."""

import pytest

from rlhflab.data.files import DataError, PreferenceRecord
from rlhflab.sources import split_heldout
from rlhflab.stages.reward import comparisons_from_pairs
from rlhflab.worlds.reviews import ReviewsWorld


@pytest.mark.parametrize("n, fraction", [(2, 0.1), (10, 0.2), (37, 0.1), (5, 0.99)])
def test_the_held_out_rows_are_apart_at_the_fraction_asked_and_the_same_for_a_seed(n, fraction):
    records = [f"row {i}" for i in range(n)]
    train, held = split_heldout(records, fraction, seed=3, path="data/prompts.jsonl")
    assert not set(train) & set(held) and sorted(train + held) == sorted(records)
    assert len(held) == min(n - 1, max(1, round(fraction * n)))
    assert train == [r for r in records if r in train] and held == [r for r in records if r in held]  # file order
    assert split_heldout(records, fraction, 3, "data/prompts.jsonl") == (train, held)
    if n >= 10:
        assert split_heldout(records, fraction, 4, "data/prompts.jsonl") != (train, held)


def test_a_file_of_one_row_cannot_be_split():
    with pytest.raises(DataError, match="expected at least 2"):
        split_heldout(["only"], 0.1, 0, "p.jsonl")


def test_each_users_pair_is_its_prompt_then_the_chosen_response_first():
    tokenizer = ReviewsWorld().tokenizer()
    records = [PreferenceRecord("this film was", "great fun", "dull", 1),
               PreferenceRecord("the plot", "was clever and warm", "was bad", 2)]
    c = comparisons_from_pairs(tokenizer, records)
    assert c.ids.shape[:2] == (2, 2) and c.gold is None
    assert c.pairs.tolist() == [[0, 1]] and c.first_preferred.tolist() == [[True], [True]]
    for n, record in enumerate(records):
        for k, response in enumerate((record.chosen, record.rejected)):
            real = c.ids[n, k][c.mask[n, k]]
            assert real[0] == tokenizer.bos_token_id and real[-1] == tokenizer.eos_token_id
            text = tokenizer.decode(real.tolist(), skip_special_tokens=True)
            alone = tokenizer.encode(f"{record.prompt} {response}", add_special_tokens=False)
            assert text.split() == tokenizer.decode(alone, skip_special_tokens=True).split()
            assert int(c.lengths[n, k]) == len(tokenizer.encode(response, add_special_tokens=False)) + 1
