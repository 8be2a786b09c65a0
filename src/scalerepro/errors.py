"""The one exception type for bad input: its message names the input and the fix."""


class UserError(Exception):
    """Bad input or environment; the CLI prints the message and exits 2, without a traceback.

    ``shared``: raised with the same message on every rank of an MPI job, after a collective the ranks agreed
    through (a broadcast or gather of the outcome), so rank 0's line says it for all of them and the CLI prints
    only that one. An error one rank found on its own is not shared: every rank that raises it prints its line,
    naming its rank.
    """

    def __init__(self, message: str, *, shared: bool = False) -> None:
        """The one-line ``message``; ``shared`` as the class says."""
        super().__init__(message)
        self.shared = shared
