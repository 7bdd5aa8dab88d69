"""The doctor's input errors, in a module of their own so that every reader (log formats,
sample files) can raise them without importing another's package."""

from rlhflab.errors import InputError


class LogFormatError(InputError):
    """A log is not in the format its reader expects, or no format recognises it."""
