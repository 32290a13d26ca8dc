"""The one exception type for user mistakes.

Library code raises `UserError` for anything the user can fix (a missing file, a
malformed line, a bad flag value). The command line catches it and prints its
message as a single line with a non-zero exit code, never a traceback; Python
callers get an ordinary exception with the same message.
"""


class UserError(Exception):
    """A mistake in the user's input: the message names the file, line or field."""
