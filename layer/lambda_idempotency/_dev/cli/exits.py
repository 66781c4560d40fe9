"""What a command ends with: its exit code, or a CommandError the user can fix."""

from __future__ import annotations

import argparse
from typing import Any

EXIT_OK = 0
EXIT_REFUSED = 1
"""release: the record's lease is live and --force was not given; nothing written."""
EXIT_FAILED = 2
"""The command could not do its work: a bad argument, no such table or record, no
credentials, no endpoint, DynamoDB or Valkey refusing or failing the call."""
EXIT_CHANGED = 3
"""release: the record changed between its read and the conditional write; nothing written."""
EXIT_NOTHING_TO_RELEASE = 4
"""release: no record, an expired one, or one already released: the key is free."""
EXIT_UNREADABLE = 5
"""A stored record or result in a shape this library does not write (shown as far as it can
be; never released)."""
OPERATOR_EXIT_CODES = """exit codes:
  0  done (release without --yes: the record shown, nothing written)
  1  release refused: the record's lease is live (add --force; a durable execution's:
     --force-durable); nothing written
  2  could not run: a bad argument, no such table or record, no credentials or endpoint,
     DynamoDB or Valkey refused or failed the call
  3  release: the record changed after it was read; nothing written (run it again)
  4  release: nothing to release (no record, expired, or already released): the key is free
  5  a stored record or result this library cannot read (inspect shows what it can)"""


class CommandError(Exception):
    """A failure the user can fix; printed as one line, never as a traceback."""

    def __init__(self, message: str, *, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


EXIT_CODES_EPILOG: dict[str, Any] = {
    "epilog": OPERATOR_EXIT_CODES,
    "formatter_class": argparse.RawDescriptionHelpFormatter,
}
"""The operator commands' --help ends with their exit codes."""
