"""Judges: models that answer a rating study (`ratings.py`) or a pair study (`pairs.py`)
in place of people. They load models, so they sit above the studies, which never do."""
