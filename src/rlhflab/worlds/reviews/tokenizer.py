"""Word-level tokenizer of the reviews world.

A ``tokenizers`` WordLevel model over the grammar's full vocabulary (so nothing the
grammar emits is unknown) plus four special tokens, split on whitespace, wrapped as a
``transformers.PreTrainedTokenizerFast``. No post-processor: callers add ``<bos>`` /
``<eos>`` themselves. Decoding joins tokens with single spaces and does no
"clean-up" (which would glue ``.`` to the previous word), so
``decode(encode(text)) == text`` for grammar text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlhflab.worlds.reviews.grammar import ReviewGrammar

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
"""Special tokens, with ids 0-3 in this order; the vocabulary follows, sorted."""


def build_tokenizer(grammar: ReviewGrammar) -> "PreTrainedTokenizerFast":
    """Word-level fast tokenizer: ids 0-3 are <pad> <bos> <eos> <unk>, then words."""
    # Imported here: the world's grammar, gold and labeler need no tokenizer library.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for word in grammar.vocabulary:
        vocab[word] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordPiece's decoder puts one space before every token not starting with the
    # (never used) "##" prefix; cleanup=False keeps " ." apart. Net effect: " ".join.
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )
    return tok
