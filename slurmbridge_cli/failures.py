"""A user's mistake is one line naming the fix and exit code 2, never a traceback: a bad
option, setting, settings file or kubeconfig (both commands; their exit codes: 2)."""

import click

EXIT_ERROR = 2


class Failure(click.ClickException):
    """A usage, configuration, connection or permission error: exit code 2."""

    exit_code = EXIT_ERROR
