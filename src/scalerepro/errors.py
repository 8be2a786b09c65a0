"""The one exception type for bad input: its message names the input and the fix."""


class UserError(Exception):
    """Bad input or environment; the CLI prints the message and exits 2, without a traceback."""
