"""The one error a `starfish` command raises for a wrong input or a failed call: `starfish_cli.entry`
prints it as one line (`starfish <command>: error: ...`) and exits with status 1."""

from __future__ import annotations


class CommandError(Exception):
    """A command cannot do what was asked; the message says why (one line)."""
