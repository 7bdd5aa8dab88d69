"""Rating studies: blind human (or judge) ratings of a run's samples across its steps.

`design` draws the items (a stratified sample over step bins), `store` keeps the study
(SQLite, every rating committed as it is given), `app` serves the blind rating page,
`stats` holds the pure statistics (bootstrap intervals, Krippendorff's alpha), `results`
summarises a study, `bots` rates through the HTTP interface like a person would.
The web app needs the `studies` extra (`pip install 'rlhflab[studies]'`).
"""
