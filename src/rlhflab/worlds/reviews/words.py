"""Hand-curated word lists of the reviews world, one tuple per part of speech.

Every list is disjoint from every other and from the grammar's literal (function)
words, so a word's category, and hence the check of a sentence, is unambiguous.
Sentiment-bearing lists (suffix ``_POS`` / ``_NEG``) hold only words in VADER's
lexicon with valence >= 1.0 / <= -1.0; neutral lists hold only words VADER ignores
(not in the lexicon, not a booster, not a negation); intensifier lists hold only
VADER boosters (``BOOSTER_DICT``: +0.293 for ``BOOST``, -0.293 for ``DAMP``).
``tests/test_world.py`` checks all of this against the installed vaderSentiment.
"""

from __future__ import annotations


def _words(text: str) -> tuple[str, ...]:
    return tuple(sorted(text.split()))


# --- neutral content words -------------------------------------------------------
NOUN = _words("""
actor actress animator atmosphere backstory book budget cameo camera cast casting
character chemistry choreography cinematographer cinematography city climax composer
concept costume couple crew detective dialogue direction director dog editing editor
ending ensemble epilogue family feature film finale flashback framing franchise
imagery intro lead lighting makeup message monster montage movie music narrative
narrator pace pacing palette performance picture plot plotline premiere premise
producer production prologue protagonist remake rhythm robot runtime scene scenery
score screening screenplay screenwriter script sequel sequence setting soldier sound
soundtrack star story storyline structure studio style subplot theme timing tone
trailer twist voice voiceover world writer
""")
"""Singular movie nouns (subjects and objects)."""

PLURAL = _words("""
actors actresses aliens animals cameos cars chapters characters chases colors
costumes creatures dancers dialogues directors dragons effects endings episodes
extras flashbacks kids landscapes lines locations monsters montages musicians
performances puns robots scenes sequences sets settings shots soldiers songs sounds
stars stunts subplots subtitles teenagers twists visuals writers
""")
"""Plural movie nouns (take ``were``)."""

GENRE = _words("""
adaptation animation anthology biopic cartoon documentary epic fantasy heist
melodrama miniseries musical mystery noir parody satire series sitcom slasher spoof
western whodunit
""")
"""Genres and formats (``this thriller``, ``what a lovely musical !``)."""

ADJ_NEUTRAL = _words("""
american average big brief british colorful complex dark dense different digital
early european experimental familiar fast final foreign french gritty heavy
historical independent indian italian japanese late lengthy local long loud
minimalist modern new old opening political predictable quiet quirky realistic
recent retro short silent simple slow small subtle theatrical tiny typical
unexpected unusual visual young
""")
"""Descriptive adjectives with no VADER valence."""

VERB_NEUTRAL = _words("attended caught rented reviewed saw streamed watched")
"""Past-tense viewing verbs (``i watched this western``)."""

PARTICIPLE = _words("""
acted animated crafted designed directed dubbed edited filmed framed lit paced
performed photographed plotted produced scored shot staged written
""")
"""Past participles after a manner adverb (``beautifully shot``)."""

TIME = _words("finally lately once recently today tonight twice yesterday")
"""Time adverbs closing a viewing sentence."""

# --- sentiment words (VADER lexicon) ----------------------------------------------
ADJ_POS = _words("""
adorable amazing amusing attractive awesome beautiful beloved bold brave brilliant
charming clever cool creative cute delightful dynamic elegant engaging enjoyable
entertaining excellent exciting fabulous fantastic fascinating fresh fun funny
gentle glorious good gorgeous graceful great happy heartwarming hilarious hopeful
impressive innovative intelligent interesting joyful lively lovely magnificent
marvelous nice outstanding perfect playful pleasant powerful precious radiant
remarkable rewarding romantic satisfying sincere smart splendid stunning superb
superior sweet talented terrific thoughtful thrilling vibrant wise wonderful worthy
""")
"""Positive adjectives."""

ADJ_NEG = _words("""
annoying awful bad boring broken careless chaotic crappy crude cruel depressing
disappointing disastrous disgusting dismal dreadful dull dumb embarrassing
exhausting fake flawed foolish frustrating grim gross hateful hopeless horrendous
horrible horrid horrific idiotic incompetent inferior insulting irritating lame lazy
lousy meaningless messy miserable nasty obnoxious offensive painful pathetic pitiful
repetitive ridiculous rotten ruined sad shameful sickening stressful stupid terrible
tragic troubling ugly unpleasant useless vile weak worthless
""")
"""Negative adjectives."""

VERB_POS = _words("""
admired adored applauded appreciated celebrated cherished enjoyed favored liked
loved praised respected treasured valued welcomed
""")
"""Positive past-tense transitive verbs (``i loved the cast``)."""

VERB_NEG = _words("""
abhorred condemned criticized despised disliked dreaded feared hated loathed mocked
regretted rejected resented
""")
"""Negative past-tense transitive verbs."""

FEEL_POS = _words("""
amazed amused captivated charmed comforted delighted enchanted encouraged
entertained excited fascinated impressed inspired pleased relaxed satisfied thrilled
""")
"""Positive effect verbs (``the ending thrilled me``)."""

FEEL_NEG = _words("""
angered annoyed appalled bored bothered confused depressed disappointed disgusted
distressed disturbed embarrassed exhausted frustrated horrified insulted irritated
offended saddened scared sickened terrified tired troubled upset worried
""")
"""Negative effect verbs (``the twist bored me``)."""

MANNER_POS = _words("""
admirably beautifully brilliantly charmingly cleverly creatively delightfully
elegantly excellently gorgeously gracefully lovingly magnificently nicely perfectly
smartly splendidly sweetly warmly wonderfully
""")
"""Positive manner adverbs (``wonderfully acted``)."""

MANNER_NEG = _words("""
awkwardly badly carelessly dreadfully dully foolishly horrendously horribly lamely
miserably painfully pathetically ridiculously shamefully stupidly terribly weakly
""")
"""Negative manner adverbs (``badly written``)."""

VERDICT_POS = _words("""
blessing charm delight favorite highlight joy marvel masterpiece miracle pleasure
success treat triumph winner
""")
"""Positive verdict nouns (``it was a masterpiece``)."""

VERDICT_NEG = _words("""
bomb bore catastrophe crime disaster disgrace embarrassment failure fiasco flop
insult mess mistake pity shame waste
""")
"""Negative verdict nouns (``it was a disaster``)."""

# --- intensifiers (VADER boosters) ------------------------------------------------
BOOST = _words("""
absolutely amazingly considerably decidedly deeply enormously entirely especially
exceptionally extremely greatly highly hugely incredibly intensely particularly
quite really remarkably so thoroughly totally tremendously unbelievably unusually
utterly very
""")
"""Boosters: VADER scales the next sentiment word up (``very good``)."""

DAMP = _words("marginally occasionally partly slightly somewhat")
"""Dampeners: VADER scales the next sentiment word down (``somewhat dull``)."""

CATEGORIES: dict[str, tuple[str, ...]] = {
    "N": NOUN,
    "P": PLURAL,
    "G": GENRE,
    "A0": ADJ_NEUTRAL,
    "V0": VERB_NEUTRAL,
    "Q": PARTICIPLE,
    "T": TIME,
    "A+": ADJ_POS,
    "A-": ADJ_NEG,
    "V+": VERB_POS,
    "V-": VERB_NEG,
    "E+": FEEL_POS,
    "E-": FEEL_NEG,
    "R+": MANNER_POS,
    "R-": MANNER_NEG,
    "S+": VERDICT_POS,
    "S-": VERDICT_NEG,
    "B+": BOOST,
    "B-": DAMP,
}
"""Category symbol -> words. ``+``/``-`` mark positive/negative valence in VADER."""

SENTIMENT_CATEGORIES = ("A+", "A-", "V+", "V-", "E+", "E-", "R+", "R-", "S+", "S-")
NEUTRAL_CATEGORIES = ("N", "P", "G", "A0", "V0", "Q", "T")
INTENSIFIER_CATEGORIES = ("B+", "B-")
