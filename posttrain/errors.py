"""Errors a user caused: bad config, bad task file, missing file. The CLI prints them in one line
and exits 2. Each message names the file, field or value and what was expected."""


class UserError(Exception):
    """Bad input from the user: printed as one line, exit code 2, nothing written is lost."""


class ConfigError(UserError):
    """A recipe key is unknown, has the wrong type, or makes an invalid combination."""


class TaskError(UserError):
    """A task file or record does not match its domain's schema."""
