"""The process's life, as the stores need to know it: Lambda's INIT, a fork, a SnapStart
restore.

- INIT (`AWS_LAMBDA_INITIALIZATION_TYPE` is set by the runtime for on-demand,
  provisioned-concurrency, snap-start and lambda-managed-instances alike): a store built at
  module scope prepares itself then (`prepares_now`), so what provisioned concurrency and
  SnapStart pre-pay includes it, and the first request does not.
- A fork (gunicorn `--preload`, a multiprocessing pool) and a SnapStart restore both copy a
  process that may have used its stores: what must be the child's own is renewed in it
  (`renew`): pooled connections (a socket shared by two processes mixes their answers), ids
  drawn at random (waiter ids), credentials of the environment before; after a restore the
  `random` module is reseeded too (a fork reseeds it itself), for retry and wait jitter.
- Where the runtime has `snapshot_restore_py` (Python's managed runtimes do), the stores
  prepare in its before-snapshot hook and renew in its after-restore hook.

Owner tokens are drawn per call from the kernel (`os.urandom`), never before a snapshot.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import weakref
from typing import Protocol

INITIALIZATION_TYPE = "AWS_LAMBDA_INITIALIZATION_TYPE"
SNAP_START = "snap-start"

logger = logging.getLogger("lambda_idempotency")


class Renewable(Protocol):
    def prepare(self) -> None:
        """Do now what the first call would otherwise do (never raises)."""

    def renew(self) -> None:
        """Drop what this process must not share with the one it was copied from."""


_tracked: weakref.WeakSet[Renewable] = weakref.WeakSet()
_hooks: list[str] = []
"""Not empty once this process installed its hooks (fork, and SnapStart's where it runs)."""
_hooking = threading.Lock()


def prepares_now() -> bool:
    """Whether this is Lambda's INIT: the runtime names the initialization type."""
    return INITIALIZATION_TYPE in os.environ


def track(store: Renewable) -> None:
    """Renew `store` in a forked child and after a SnapStart restore (hooks installed once)."""
    _tracked.add(store)
    if _hooks:
        return
    with _hooking:
        if _hooks:
            return
        os.register_at_fork(after_in_child=_after_fork)
        if os.environ.get(INITIALIZATION_TYPE) == SNAP_START:
            _register_snapshot_hooks()
        _hooks.append("installed")


def _register_snapshot_hooks() -> None:
    try:
        from snapshot_restore_py import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
            register_after_restore,
            register_before_snapshot,
        )
    except ImportError:
        logger.warning(
            "lambda_idempotency: SnapStart, but no snapshot_restore_py to hook: stores "
            "prepare at their first call and keep what they drew before the snapshot"
        )
        return
    register_before_snapshot(before_snapshot)
    register_after_restore(after_restore)


def before_snapshot() -> None:
    """SnapStart's before-snapshot hook: every store prepared, so the snapshot holds it."""
    for store in list(_tracked):
        store.prepare()


def after_restore() -> None:
    """SnapStart's after-restore hook: what was drawn or opened before the snapshot is drawn
    and opened anew in each environment restored from it."""
    random.seed()
    _renew_all()


def _after_fork() -> None:
    _renew_all()


def _renew_all() -> None:
    for store in list(_tracked):
        try:
            store.renew()
        except Exception:  # a store that cannot renew must not stop the others, or the process
            logger.exception("lambda_idempotency: a store could not renew itself")
