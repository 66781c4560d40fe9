"""`python -m lambda_idempotency` is the `lambda-idempotency` command."""

import sys

from ._cli import main

sys.exit(main())
