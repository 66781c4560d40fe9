"""`release`: one key let run again, by a RELEASED tombstone written on the condition that
the record is still the one read and shown; a live lease needs --force (a durable
execution's, --force-durable)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import TYPE_CHECKING, Any

from ..._base.errors import StoreError
from ..._stores.record import Status
from . import tables
from .exits import (
    EXIT_CHANGED,
    EXIT_CODES_EPILOG,
    EXIT_NOTHING_TO_RELEASE,
    EXIT_OK,
    EXIT_REFUSED,
    CommandError,
)
from .inspect_records import no_record
from .records import (
    DECODE_ERRORS,
    call_failed,
    describe,
    lease_end_ms,
    now_ms,
    print_record,
    read_record,
    record_pk,
    when,
)
from .tables import on_table, operator_config

if TYPE_CHECKING:
    from ..._stores.contract import OperatorStore
    from ..._stores.record import Record


def add_command(add: Any, record: argparse.ArgumentParser) -> None:
    """`release`, over the options that name one record."""
    codes = EXIT_CODES_EPILOG
    release = add(
        "release",
        parents=[record],
        help="let one key run again: a RELEASED tombstone over the record shown",
        description=textwrap.fill(
            "Replaces one record with a RELEASED tombstone so its key runs again, on the "
            "condition that it is still the record read a moment before (same status, owner "
            "token, lease, expiration and times): a record completed, claimed or released in "
            "between stays, and the command says so (exit 3). A COMPLETED record may be "
            "released: its next call runs the handler again. An IN_PROGRESS record whose lease "
            "is live (its holder may still be running) is refused without --force, and one a "
            "durable execution holds without --force-durable. The "
            "tombstone keeps the holder's owner token: a delayed copy of its claim cannot lock "
            "the key again, and a holder that was still running may still complete. Nothing "
            "to release (no record, expired, already released): exit 4. Needs "
            "dynamodb:GetItem and dynamodb:PutItem. With --valkey-url, a ValkeyStore's record "
            "(one script, fenced the same way).",
            88,
            break_on_hyphens=False,
        ),
        **codes,
    )
    release.add_argument(
        "--yes",
        action="store_true",
        help="really write the tombstone (without it: a dry run, exit 0, nothing written)",
    )
    release.add_argument(
        "--force",
        action="store_true",
        help="also over a live lease, whose holder may still be running (not a durable "
        "execution's: see --force-durable)",
    )
    release.add_argument(
        "--force-durable",
        action="store_true",
        help="also over the live lease of a durable execution (owner token d-...), which "
        "lasts its whole timeout: only once it has ended (" + FORCE_DURABLE_WHY + ")",
    )
    release.set_defaults(run=_cmd_release)


FORCE_DURABLE_WHY = (
    "check with `aws lambda get-durable-execution`: stopped, timed out or failed). If it has "
    "not ended, it takes the key back when it resumes and completes over the tombstone, its "
    "result standing; but a new execution with the key that starts before it resumes runs "
    "the handler again, and then the resumed one fails with InProgressError: two effects"
)


def _durable_holder(record: Record) -> bool:
    """Whether a durable execution holds the record: its owner token is the execution's."""
    from ..._protocol.durable import OWNER_PREFIX

    return record.owner is not None and record.owner.startswith(OWNER_PREFIX)


def _cmd_release(args: argparse.Namespace) -> int:
    store = tables.operator_store(args, operator_config())
    pk = record_pk(args, store)
    with on_table(store, args):
        return _release(store, pk, args)


def _release(store: OperatorStore, pk: str, args: argparse.Namespace) -> int:
    """Replace the record read here, and only that version of it, with a RELEASED tombstone
    (the store's release_version): a record completed, claimed or released in between stays
    as it is (EXIT_CHANGED), and a live lease needs --force. Judged at the record's read
    (`Record.judged_at`): on Valkey the server's clock, as the claims are."""
    stamp = now_ms()
    record = read_record(store, pk)
    if record is None:
        raise CommandError(
            f"nothing to release: {no_record(store, pk, args)}; the key is free",
            status=EXIT_NOTHING_TO_RELEASE,
        )
    now = record.judged_at(stamp)
    free = _free(record, now)
    if free is not None:
        raise CommandError(f"nothing to release: {free}", status=EXIT_NOTHING_TO_RELEASE)
    live_until = _live_lease_until(record, now)
    durable = live_until is not None and _durable_holder(record)
    if not args.yes:  # a dry run: it ran, and wrote nothing
        print_record(describe(record, now))
        force = "" if live_until is None else " and --force (its lease is live)"
        if durable:
            force = " and --force-durable (a durable execution holds it: see its --help)"
        print(
            "dry run, nothing written: release writes a RELEASED tombstone over this record, "
            f"so its key runs again: add --yes{force}",
            file=sys.stderr,
        )
        return EXIT_OK
    if live_until is not None and durable and not args.force_durable:
        raise CommandError(
            f"refused: {pk} is held by a durable execution until {when(live_until, now)} "
            "(its whole timeout): it may be suspended, and resume. --force does not release "
            f"it; --force-durable does, once that execution has ended ({FORCE_DURABLE_WHY})",
            status=EXIT_REFUSED,
        )
    if live_until is not None and not (args.force or durable):
        raise CommandError(
            f"refused: {pk} is IN_PROGRESS and its lease runs until {when(live_until, now)}: "
            "its holder may still be running. Wait for the lease to end (the next retry then "
            "takes the key over), or add --force",
            status=EXIT_REFUSED,
        )
    try:
        released, current = store.release_version(record, now_ms=stamp)
        now_is = "gone" if current is None else current.status.value
    except StoreError as exc:
        if call_failed(exc):
            raise
        released, current, now_is = False, None, "a record this library cannot read"
    except DECODE_ERRORS:
        released, current, now_is = False, None, "a record this library cannot read"
    if not released:
        if current is not None and current.owner != record.owner:
            now_is += " under another claim"
        raise CommandError(
            f"changed: {pk} is {now_is} now, not the {record.status.value} record read a "
            "moment ago; nothing was written (run release again to see it)",
            status=EXIT_CHANGED,
        )
    print(f"released {pk} (was {record.status.value}): its next call runs the handler again")
    if live_until is not None:
        print(
            f"warning: the holder of {pk} may still be running: its lease ends "
            f"{when(live_until, now)}. If it completes before a retry claims the key, its "
            "result stands and retries replay it; if a retry claims first, both may run",
            file=sys.stderr,
        )
    return EXIT_OK


def _live_lease_until(record: Record, now_ms: int) -> int | None:
    """When the lease of an IN_PROGRESS record ends, if it is live on any clock within the
    protocol's skew allowance (its holder may still be running); else None."""
    from ..._protocol.run import DEFAULT_CLOCK_SKEW_SECONDS

    lease_end = lease_end_ms(record)
    if lease_end is None or lease_end < now_ms - int(DEFAULT_CLOCK_SKEW_SECONDS * 1000):
        return None
    return lease_end


def _free(record: Record, now_ms: int) -> str | None:
    """Why the key is free already (expired, released), or None."""
    if record.is_expired(now_ms):
        expired = when((record.expiration + 1) * 1000, now_ms)
        return f"{record.pk} expired {expired}; it counts as absent and the key is free"
    if record.status is not Status.RELEASED:
        return None
    if record.lease_until is None:
        return f"{record.pk} is released; the key is free"
    released = when(record.lease_until, now_ms)
    return f"{record.pk} was released {released}; the key is free to any call made since"
