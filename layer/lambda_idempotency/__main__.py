"""`python -m lambda_idempotency` is the `lambda-idempotency` command (pip installs only)."""

import sys

from ._dev.cli import main

sys.exit(main())
