"""The reviews grammar: a seeded probabilistic grammar of short movie reviews.

The same templates both generate and check text. A template is a pattern over word
categories (``words.CATEGORIES``), polarity slots and literal words, written in a
tiny notation:

    NAME          a category (``N``, ``A0``, ``B+``...), a slot or a macro
    word          a literal word or punctuation token (``was``, ``,``, ``!``)
    ( x | y z )   alternatives, drawn uniformly
    [0.3 x y]     optional group, included with probability 0.3

Slots draw from the positive or negative category of a part of speech (``ADJ`` also
from the neutral one) according to the polarity of the clause they sit in, flipped
after a negation, so a review with a latent *mood* reads coherently ("the plot was
not dull but the cast was wonderful ."). ``NEGP`` is a negation drawn when the
clause is negative (``i would not recommend it .``).

Checking maps each word to a one-character category symbol and matches the symbol
string against all templates compiled into one regular expression, plus the a/an
rule. A sentence is the words up to and including ``.`` or ``!``; trailing words
with no terminator form one more (ungrammatical) sentence.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from rlhflab.worlds.reviews import words as W

TERMINATORS = (".", "!")

MACROS: dict[str, str] = {
    "DET": "( the | this | that )",
    "NPS": "( DET [0.25 A0] N )",
    "NPP": "( ( the | these | those ) [0.25 A0] P )",
    "SUBJ": "( NPS was | NPP were )",
    "PRO": "( i | we )",
    "NOT": "[0.2 ( not | never )]",
    "INT": "[0.4 MOD]",
    "END": "( . | ! )",
}
"""Abbreviations expanded (recursively) inside templates before parsing."""

SLOTS: dict[str, tuple[str, ...]] = {
    "ADJ": ("A+", "A-", "A0"),
    "VERB": ("V+", "V-"),
    "FEEL": ("E+", "E-"),
    "MANNER": ("R+", "R-"),
    "VERDICT": ("S+", "S-"),
    "MOD": ("B+", "B-"),
}
"""Slot -> (positive, negative[, neutral]) categories; MOD -> (booster, dampener)."""

TEMPLATES: tuple[tuple[str, str], ...] = (
    ("copula", "NPS was NOT INT ADJ END"),
    ("copula_plural", "NPP were NOT INT ADJ END"),
    ("it_was", "[0.3 overall ,] it was NOT INT ADJ END"),
    ("two_adjectives", "SUBJ INT ADJ and INT ADJ END"),
    ("conjoined", "NPS and NPS were NOT INT ADJ END"),
    ("opinion", "PRO ( thought | felt ) SUBJ NOT INT ADJ END"),
    ("verb_object", "PRO [0.2 never] VERB ( NPS | NPP ) END"),
    ("every", "PRO INT VERB every [0.25 A0] N END"),
    ("watched", "PRO V0 ( this [0.3 A0] | a INT ADJ ) G [0.4 T] END"),
    ("verdict", "( it | NPS ) was NOT a VERDICT END"),
    ("manner", "SUBJ NOT INT MANNER Q END"),
    ("feeling", "( NPS | NPP ) INT FEEL ( me | us ) END"),
    ("exclamation", "what a INT ADJ ( G | N ) !"),
    ("recommend", "PRO would NEGP recommend ( it | this G ) [0.3 to ( anyone | everyone )] END"),
    ("contrast", "SUBJ NOT INT ADJ ( but | yet ) SUBJ NOT INT ADJ END"),
    ("although", "( although | though ) SUBJ NOT INT ADJ , SUBJ NOT INT ADJ END"),
    ("verb_contrast", "PRO [0.2 never] VERB ( NPS | NPP ) but [0.2 never] VERB ( NPS | NPP ) END"),
)
"""(name, pattern) of every sentence template."""

TEMPLATE_WEIGHTS: dict[str, float] = {
    "copula": 3.0, "copula_plural": 1.5, "it_was": 2.0, "two_adjectives": 1.0,
    "conjoined": 0.7, "opinion": 1.0, "verb_object": 2.0, "every": 1.0,
    "watched": 1.5, "verdict": 1.0, "manner": 1.0, "feeling": 1.0,
    "exclamation": 1.0, "recommend": 1.0, "contrast": 1.5, "although": 1.0,
    "verb_contrast": 1.0,
}
"""Relative template frequencies; a mixed review multiplies contrastive ones."""

CONTRAST_WORDS = frozenset({"but", "yet", "although", "though"})
CLAUSE_BREAKS = frozenset({"but", "yet", ","})  # the second clause starts after these
NEGATIONS = ("not", "never")
CONTENT_LITERALS = frozenset({"recommend"})  # literal words that still carry content

MOODS = ("positive", "negative", "mixed")
MOOD_WEIGHTS = (0.4, 0.4, 0.2)
PROMPT_WORDS = (2, 5)  # a prompt is a review's first 2 to 5 words (one token each)
N_SENTENCE_WEIGHTS = (0.3, 0.4, 0.3)  # P(1, 2, 3 sentences)
MIXED_CONTRAST_BOOST = 4.0  # template weight multiplier for contrastive templates in a mixed review
P_SENTENCE_FOLLOWS_MOOD = 0.92  # P(sentence polarity = mood polarity), non-mixed moods
P_CONTRAST_FLIPS = 0.8  # P(first clause of a contrast has the opposite polarity)
P_SLOT_OPPOSITE = 0.05  # P(a slot word has the opposite of the clause's polarity)
P_ADJ_NEUTRAL = 0.1  # P(an ADJ slot takes a neutral adjective)
P_BOOST = 0.75  # P(a MOD slot is a booster rather than a dampener)
P_NEGP = 0.9  # P(NEGP negates a negative clause); 1 - P_NEGP for a positive one

# a/an: "an" before a vowel letter, except these vowel-letter words with a consonant sound.
_CONSONANT_SOUND = frozenset({"european", "useless"})

# Tree nodes: (kind, payload...). Tuples keep the generator loop cheap.
_LIT, _CAT, _SLOT, _SEQ, _ALT, _OPT, _NEGP = range(7)


def _takes_an(word: str) -> bool:
    return (word[0] in "aeiou") != (word in _CONSONANT_SOUND)


_TOKEN = re.compile(r"[()\[\]|]|[^\s()\[\]|]+")


def _expand(pattern: str) -> list[str]:
    tokens = _TOKEN.findall(pattern)
    out: list[str] = []
    for tok in tokens:
        out.extend(_expand(MACROS[tok]) if tok in MACROS else [tok])
    return out


def _parse(tokens: list[str]) -> tuple:
    """Recursive-descent parse of an expanded token list into a node tree."""
    pos = 0

    def seq(stop: tuple[str, ...]) -> tuple:
        nonlocal pos
        items = []
        while pos < len(tokens) and tokens[pos] not in stop:
            tok = tokens[pos]
            pos += 1
            if tok == "(":
                alts = [seq(("|", ")"))]
                while tokens[pos] == "|":
                    pos += 1
                    alts.append(seq(("|", ")")))
                pos += 1  # ")"
                items.append((_ALT, tuple(alts)))
            elif tok == "[":
                p = float(tokens[pos])
                pos += 1
                body = seq(("]",))
                pos += 1  # "]"
                items.append((_OPT, p, body))
            elif tok == "NEGP":
                items.append((_NEGP,))
            elif tok in SLOTS:
                items.append((_SLOT, tok))
            elif tok in W.CATEGORIES:
                items.append((_CAT, tok))
            elif tok.isupper():
                raise ValueError(f"unknown name {tok!r} in template")
            else:
                items.append((_LIT, tok))
        return (_SEQ, tuple(items))

    tree = seq(())
    if pos != len(tokens):
        raise ValueError(f"unbalanced template: {' '.join(tokens)}")
    return tree


def _literals(node: tuple) -> set[str]:
    kind = node[0]
    if kind == _LIT:
        return {node[1]}
    if kind == _NEGP:
        return set(NEGATIONS)
    if kind in (_SEQ, _ALT):
        return set().union(*(_literals(c) for c in node[1])) if node[1] else set()
    if kind == _OPT:
        return _literals(node[2])
    return set()


@dataclass(frozen=True)
class Template:
    """One sentence template: its name, its pattern and the parsed tree."""

    name: str
    pattern: str
    tree: tuple
    contrastive: bool  # first clause may take the opposite polarity


class _Sentence:
    """Mutable state while one sentence is generated."""

    __slots__ = ("rng", "used", "out", "target", "pol", "neg")

    def __init__(self, rng: random.Random, used: set[str], target: int, first: int):
        self.rng = rng
        self.used = used
        self.out: list[str] = []
        self.target = target  # polarity of the sentence's main clause (+1 / -1)
        self.pol = first  # polarity of the current clause
        self.neg = False  # a negation was emitted in the current clause


class ReviewGrammar:
    """The reviews grammar: fixed vocabulary and templates; sampling takes an rng."""

    def __init__(self) -> None:
        self.categories: dict[str, tuple[str, ...]] = dict(W.CATEGORIES)
        self.templates: tuple[Template, ...] = tuple(
            Template(
                name,
                pattern,
                tree,
                contrastive=bool(CONTRAST_WORDS & _literals(tree)),
            )
            for name, pattern in TEMPLATES
            for tree in [_parse(_expand(pattern))]
        )
        literals = set().union(*(_literals(t.tree) for t in self.templates))
        literals.add("an")  # written as "a" in templates, chosen by the a/an rule
        self.literals: frozenset[str] = frozenset(literals)
        self.function_words: frozenset[str] = frozenset(literals - CONTENT_LITERALS)
        """Closed-class words (determiners, pronouns, copulas, negations, conjunctions,
        punctuation): repeating them is not penalised by the gold utility."""

        # One symbol per category and per literal; "an" shares "a"'s symbol.
        symbol: dict[str, str] = {}
        for i, name in enumerate(sorted(self.categories) + sorted(literals - {"an"})):
            symbol[name] = chr(0xE000 + i)
        symbol["an"] = symbol["a"]
        self._symbol = symbol
        word_symbol: dict[str, str] = {}
        for cat, ws in self.categories.items():
            for w in ws:
                if w in word_symbol or w in literals:
                    raise ValueError(f"word {w!r} is in two categories")
                word_symbol[w] = symbol[cat]
        for lit in literals:
            word_symbol[lit] = symbol[lit]
        self._word_symbol = word_symbol
        self._unknown = chr(0xF8FF)  # a symbol no template contains
        self._regexes = {t.name: re.compile(self._regex(t.tree)) for t in self.templates}
        self._any = re.compile("|".join(f"(?:{r.pattern})" for r in self._regexes.values()))
        self.vocabulary: list[str] = sorted(word_symbol)
        """Every word and punctuation token the grammar can emit, sorted."""
        self._weights = {
            mood: [
                TEMPLATE_WEIGHTS[t.name]
                * (MIXED_CONTRAST_BOOST if mood == "mixed" and t.contrastive else 1.0)
                for t in self.templates
            ]
            for mood in MOODS
        }

    # --- checking -------------------------------------------------------------------
    def _regex(self, node: tuple) -> str:
        kind = node[0]
        if kind == _LIT:
            return re.escape(self._symbol[node[1]])
        if kind == _CAT:
            return re.escape(self._symbol[node[1]])
        if kind == _SLOT:
            return "[" + "".join(re.escape(self._symbol[c]) for c in SLOTS[node[1]]) + "]"
        if kind == _SEQ:
            return "".join(self._regex(c) for c in node[1])
        if kind == _ALT:
            return "(?:" + "|".join(self._regex(c) for c in node[1]) + ")"
        if kind == _OPT:
            return "(?:" + self._regex(node[2]) + ")?"
        if kind == _NEGP:
            return "(?:" + "|".join(re.escape(self._symbol[n]) for n in NEGATIONS) + ")?"
        raise AssertionError(kind)

    def _symbols(self, sentence: list[str]) -> str:
        get, unk = self._word_symbol.get, self._unknown
        return "".join([get(w, unk) for w in sentence])

    @staticmethod
    def _articles_ok(sentence: list[str]) -> bool:
        for i, w in enumerate(sentence):
            if w in ("a", "an") and (i + 1 >= len(sentence) or _takes_an(sentence[i + 1]) != (w == "an")):
                return False
        return True

    def is_grammatical(self, sentence: list[str]) -> bool:
        """True iff the words (terminator included) match some template."""
        if self._any.fullmatch(self._symbols(sentence)) is None:
            return False
        return self._articles_ok(sentence)

    def template_of(self, sentence: list[str]) -> str | None:
        """Name of the first template the sentence matches, or None."""
        syms = self._symbols(sentence)
        if not self._articles_ok(sentence):
            return None
        for name, rx in self._regexes.items():
            if rx.fullmatch(syms):
                return name
        return None

    @staticmethod
    def split_sentences(text: str) -> list[list[str]]:
        """Words up to and including each terminator; a trailing fragment is one more."""
        sentences: list[list[str]] = []
        current: list[str] = []
        for w in text.split():
            current.append(w)
            if w == "." or w == "!":
                sentences.append(current)
                current = []
        if current:
            sentences.append(current)
        return sentences

    def count_ungrammatical(self, text: str) -> tuple[int, int]:
        """(number of sentences, number of them that match no template)."""
        sentences = self.split_sentences(text)
        bad = sum(not self.is_grammatical(s) for s in sentences)
        return len(sentences), bad

    # --- generation -----------------------------------------------------------------
    def _draw(self, st: _Sentence, cat: str) -> str:
        """A word of ``cat`` not used earlier in the review (so no content repeats)."""
        ws = self.categories[cat]
        rng, used = st.rng, st.used
        for _ in range(8):
            w = ws[int(rng.random() * len(ws))]
            if w not in used:
                break
        else:
            fresh = [w for w in ws if w not in used]
            w = rng.choice(fresh) if fresh else rng.choice(ws)
        used.add(w)
        return w

    def _gen(self, node: tuple, st: _Sentence) -> None:
        kind = node[0]
        if kind == _SEQ:
            for child in node[1]:
                self._gen(child, st)
        elif kind == _LIT:
            w = node[1]
            st.out.append(w)
            if w in CLAUSE_BREAKS:
                st.pol, st.neg = st.target, False
            elif w in NEGATIONS:
                st.neg = True
        elif kind == _CAT:
            st.out.append(self._draw(st, node[1]))
        elif kind == _SLOT:
            st.out.append(self._draw(st, self._slot_category(node[1], st)))
        elif kind == _ALT:
            alts = node[1]
            self._gen(alts[int(st.rng.random() * len(alts))], st)
        elif kind == _OPT:
            if st.rng.random() < node[1]:
                self._gen(node[2], st)
        elif kind == _NEGP:
            if st.rng.random() < (P_NEGP if st.pol < 0 else 1.0 - P_NEGP):
                st.out.append(NEGATIONS[int(st.rng.random() * 2)])
                st.neg = True
        else:
            raise AssertionError(kind)

    def _slot_category(self, slot: str, st: _Sentence) -> str:
        cats = SLOTS[slot]
        r = st.rng.random()
        if slot == "MOD":  # only boosters after a negation: "not very", not "not somewhat"
            return cats[0] if st.neg or r < P_BOOST else cats[1]
        want = -st.pol if st.neg else st.pol  # "not" + positive word reads negative
        if r < P_SLOT_OPPOSITE:
            return cats[1] if want > 0 else cats[0]
        if len(cats) == 3 and r < P_SLOT_OPPOSITE + P_ADJ_NEUTRAL:
            return cats[2]
        return cats[0] if want > 0 else cats[1]

    def _sentence(self, rng: random.Random, mood: str, used: set[str]) -> list[str]:
        if mood == "mixed":
            target = 1 if rng.random() < 0.5 else -1
        else:
            sign = 1 if mood == "positive" else -1
            target = sign if rng.random() < P_SENTENCE_FOLLOWS_MOOD else -sign
        for _ in range(20):
            template = rng.choices(self.templates, weights=self._weights[mood])[0]
            flip = template.contrastive and rng.random() < P_CONTRAST_FLIPS
            st = _Sentence(rng, set(used), target, -target if flip else target)
            self._gen(template.tree, st)
            out = st.out
            # Literal content words ("recommend") are not drawn, so check them here.
            if not any(w in used for w in out if w in CONTENT_LITERALS):
                break
        used |= st.used
        used.update(w for w in out if w in CONTENT_LITERALS)
        for i in range(len(out) - 1):
            if out[i] == "a" and _takes_an(out[i + 1]):
                out[i] = "an"
        return out

    def sample_review_words(self, rng: random.Random, mood: str | None = None) -> list[str]:
        """A review as a word list; ``mood`` is drawn from MOODS unless given."""
        if mood is None:
            mood = rng.choices(MOODS, weights=MOOD_WEIGHTS)[0]
        elif mood not in MOODS:
            raise ValueError(f"mood must be one of {MOODS}, got {mood!r}")
        n = rng.choices((1, 2, 3), weights=N_SENTENCE_WEIGHTS)[0]
        used: set[str] = set()
        out: list[str] = []
        for _ in range(n):
            out.extend(self._sentence(rng, mood, used))
        return out

    def sample_review(self, rng: random.Random, mood: str | None = None) -> str:
        """One full review (1-3 sentences); ``mood`` is drawn unless given."""
        return " ".join(self.sample_review_words(rng, mood))

    def sample_prompt(self, rng: random.Random) -> str:
        """The first 2-5 words (PROMPT_WORDS) of a fresh review, always short of its last token."""
        words = self.sample_review_words(rng)
        k = min(rng.randint(*PROMPT_WORDS), len(words) - 1)
        return " ".join(words[:k])
