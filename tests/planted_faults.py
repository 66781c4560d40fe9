# ruff: noqa: E501  (the faults quote the source lines they replace, verbatim)
"""Faults planted by hand in the lease, heartbeat, completion-window and deferred-result code
(issue 31) and in the direct path to DynamoDB (issue 39), each run against the fast test files that should catch it: how long each takes to
fail. `python tests/planted_faults.py [index ...]` from the repository root (DynamoDB Local
as for the suite: DYNAMODB_LOCAL_HOME). Each fault is applied to a copy of `layer/`, never to
the checkout. docs/contributing/testing.md has the table of the last run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
L = "lambda_idempotency/"
LW = "tests/integration/test_long_work.py"
LE = "tests/integration/test_lease_extension.py"
DIRECT = [
    "tests/unit/test_direct_model.py",
    "tests/integration/test_direct_wire.py",
    "tests/integration/test_direct_attacks.py",
]
"""The direct path's tests (issue 39): its faults are planted against them."""
TRACED = [
    "tests/unit/test_direct_traced.py",
    "tests/integration/test_traced_paths.py",
    "tests/integration/test_traced_attacks.py",
]
"""The lean paths under tracers and hooks (issue 40): their faults are planted against them."""
SIGNING = [
    "tests/unit/test_wire_signing.py",
    "tests/unit/test_wire_signing_attacks.py",
    "tests/unit/test_wire_conformance.py",
]
"""The lean paths' SigV4 and prepared request, against botocore's own."""
Plant = tuple  # (name, module, old, new, test files, *(module, old, new) more edits)

PLANTS: list[Plant] = [
    (
        "claim: clock read before the client is built (sync)",
        "_protocol/claiming.py",
        (
            "    try:\n"
            '        store.ready("put_item", pk, step="claim")  # built before the clock is read\n'
            "    except StoreError as exc:  # nothing was sent: nothing to release\n"
            '        engine._count("store_error", logging.ERROR, pk, step="claim", code=exc.code)\n'
            "        raise\n"
            "    clock = engine.settings.clock\n"
            "    now, ticks = clock.now_ms(), monotonic_ms(clock)\n"
        ),
        (
            "    clock = engine.settings.clock\n"
            "    now, ticks = clock.now_ms(), monotonic_ms(clock)\n"
            "    try:\n"
            '        store.ready("put_item", pk, step="claim")  # built before the clock is read\n'
            "    except StoreError as exc:  # nothing was sent: nothing to release\n"
            '        engine._count("store_error", logging.ERROR, pk, step="claim", code=exc.code)\n'
            "        raise\n"
        ),
        [LW],
    ),
    (
        "claim: remaining time read before the client is built, clock after",
        "_protocol/claiming.py",
        (
            "    try:\n"
            '        store.ready("put_item", pk, step="claim")  # built before the clock is read\n'
            "    except StoreError as exc:  # nothing was sent: nothing to release\n"
            '        engine._count("store_error", logging.ERROR, pk, step="claim", code=exc.code)\n'
            "        raise\n"
            "    clock = engine.settings.clock\n"
            "    now, ticks = clock.now_ms(), monotonic_ms(clock)\n"
            "    lease_ms = engine._lease_ms(context)\n"
        ),
        (
            "    lease_ms = engine._lease_ms(context)\n"
            "    try:\n"
            '        store.ready("put_item", pk, step="claim")  # built before the clock is read\n'
            "    except StoreError as exc:  # nothing was sent: nothing to release\n"
            '        engine._count("store_error", logging.ERROR, pk, step="claim", code=exc.code)\n'
            "        raise\n"
            "    clock = engine.settings.clock\n"
            "    now, ticks = clock.now_ms(), monotonic_ms(clock)\n"
        ),
        [LW],
    ),
    (
        "async: claim's clock read on the loop, before the executor queue",
        "_protocol/claiming.py",
        (
            "    now, ticks = clock.now_ms(), monotonic_ms(clock)\n    lease_ms = engine._lease_ms(context)\n"
        ),
        (
            "    now, ticks = execution.claimed_at_ms or clock.now_ms(), monotonic_ms(clock)\n"
            "    lease_ms = engine._lease_ms(context)\n"
        ),
        [LW],
        (
            "_protocol/coroutines.py",
            "    execution = new_execution(pk, None)\n",
            ("    execution = new_execution(pk, None)\n    execution.claimed_at_ms = now\n"),
        ),
    ),
    (
        "async engine: a heartbeat failure the coroutine swallowed is not raised",
        "_protocol/coroutines.py",
        (
            "        if execution._failure is not None:\n"
            "            raise execution._failure  # a heartbeat lost the key: complete nothing\n"
        ),
        "",
        [LW],
    ),
    (
        "extend_lease shortens a longer lease",
        "_protocol/claiming.py",
        "lease_until = max(now + int(seconds * 1000), execution.lease_until_ms or now)",
        "lease_until = now + int(seconds * 1000)",
        [LW],
    ),
    (
        "extend_lease: inf accepted (finite and bounded checks dropped)",
        "_protocol/execution.py",
        (
            "        and -MAX_EXTENSION_SECONDS <= seconds <= MAX_EXTENSION_SECONDS  # before a float of it\n"
            "        and math.isfinite(seconds)\n"
            "        and (seconds >= least if least else seconds > 0)\n"
        ),
        "        and (seconds >= least if least else seconds > 0)\n",
        [LW],
    ),
    (
        "heartbeat: an error in its thread swallowed",
        "_protocol/execution.py",
        (
            "            except BaseException as exc:  # anything that ends the beats is reported\n"
            "                failure.append(exc)\n"
        ),
        ("            except BaseException:\n                pass\n"),
        [LW],
    ),
    (
        "heartbeat: a refused write retried silently",
        "_protocol/execution.py",
        ("                        if not exc.retryable:\n                            raise\n"),
        "",
        [LW],
    ),
    (
        "heartbeat: lapse between beats not checked",
        "_protocol/execution.py",
        "    if lapsed and not execution._released:  # released: no lease held since, none to lapse",
        "    if False:",
        [LW],
    ),
    (
        "engine: a heartbeat failure the handler swallowed is not raised",
        "_protocol/run.py",
        (
            "            if execution._failure is not None:\n"
            "                raise execution._failure  # a heartbeat lost the key: complete nothing\n"
        ),
        "",
        [LW],
    ),
    (
        "completion window from the claim instead of the end of work",
        "_protocol/completing.py",
        "    return completed_at + window - answer_margin_ms(window)",
        "    return (execution.claimed_at_ms or completed_at) + window - answer_margin_ms(window)",
        [LW],
    ),
    (
        "completion window: the context's deadline ignored",
        "_protocol/claiming.py",
        "    return now_ms + remaining - _completing.answer_margin_ms(remaining)",
        "    return now_ms + min(remaining, 10_000) - _completing.answer_margin_ms(remaining)",
        [LW],
    ),
    (
        "nested deferred check dropped",
        "_stores/encoding.py",
        (
            "    deferred = deferred_in(result)\n"
            "    if deferred:\n"
            '        return Encoded(b"", None, False, "deferred", deferred)\n'
        ),
        "",
        [LW],
    ),
    (
        "pydantic drains a nested generator (pre-check dropped)",
        "_stores/encoding.py",
        (
            "        if deferred_in(value):  # pydantic would drain a generator or iterator into a li"
            "st\n"
        ),
        "        if False:\n",
        [LW],
    ),
    (
        "async: nested deferred raised without releasing the key",
        "_protocol/coroutines.py",
        "        await _to_the_end(_completing.release, engine, store, execution, reason=reason)\n",
        "",
        [LW],
    ),
    (
        "sync: nested deferred raised without releasing the key",
        "_protocol/completing.py",
        (
            '        release(engine, store, execution, reason="DeferredResultError")\n'
            "        raise\n"
        ),
        "        raise\n",
        [LW],
    ),
    (
        "store: extension's owner condition dropped",
        "_stores/dynamodb/claim_rewrites.py",
        (
            "        Item=item,\n"
            '        ConditionExpression=f"{OWNED_BY_ME} AND {STILL_IN_PROGRESS}",'
        ),
        ('        Item=item,\n        ConditionExpression=f"{STILL_IN_PROGRESS}",'),
        [LE],
    ),
    (
        "direct path: blob not decoded",
        "_stores/dynamodb/direct/shapes.py",
        "            member = base64.b64decode(member)",
        "            pass",
        DIRECT,
    ),
    (
        "direct path: error threshold",
        "_stores/dynamodb/direct/shapes.py",
        "if status >= 301:",
        "if status >= 400:",
        DIRECT,
    ),
    (
        "direct path: error code prefix kept",
        "_stores/dynamodb/direct/shapes.py",
        '        code = code.rsplit("#", 1)[1]',
        "        pass",
        DIRECT,
    ),
    (
        "direct path: modeled error members dropped (CCF item)",
        "_stores/dynamodb/direct/shapes.py",
        "        parsed.update(_members(document, members, code))",
        "        pass",
        DIRECT,
    ),
    (
        "direct path: blob not base64 encoded",
        "_stores/dynamodb/direct/shapes.py",
        'return json.dumps(params, default=_base64).encode("utf-8")',
        'return json.dumps(params, default=str).encode("utf-8")',
        DIRECT,
    ),
    (
        "direct path: no retries",
        "_stores/dynamodb/direct/transport.py",
        "        while self._needs_retry(operation, model, attempts, request_dict, success, exception):",
        "        while False:",
        DIRECT,
    ),
    (
        "direct path: retry count",
        "_stores/dynamodb/direct/transport.py",
        '            success[1]["ResponseMetadata"]["RetryAttempts"] = attempts - 1',
        "            pass",
        DIRECT,
    ),
    (
        "direct path: 4xx returned as success",
        "_stores/dynamodb/direct/transport.py",
        "        if http.status_code >= 300:",
        "        if http.status_code >= 500:",
        DIRECT,
    ),
    (
        "direct path: renew keeps old credentials",
        "_stores/dynamodb/direct/transport.py",
        "        if not isinstance(settings, str):\n            self._credentials = settings.credentials",
        "        if not isinstance(settings, str):\n            pass",
        DIRECT,
    ),
    (
        "direct path: renew keeps pool",
        "_stores/dynamodb/direct/transport.py",
        "        self._http = None\n",
        "        pass\n",
        DIRECT,
    ),
    (
        "direct path: a tracer's wrapper not called",
        "_stores/dynamodb/direct/transport.py",
        '        wrappers = methods.wrappers.get("_make_api_call")\n        if wrappers:',
        '        wrappers = methods.wrappers.get("_make_api_call")\n        if False:',
        DIRECT,
    ),
    (
        "direct path: botocore's built-in handlers not copied in (moto, retry headers)",
        "_stores/dynamodb/direct/transport.py",
        '            if not event.startswith(("request-created", "before-send")):',
        "            if True:",
        DIRECT,
    ),
    (
        "direct path: table ARN served",
        "_stores/dynamodb/direct/settings.py",
        '    if table_name is not None and table_name.startswith("arn:"):',
        "    if False:",
        DIRECT,
    ),
    (
        "direct path: FIPS served",
        "_stores/dynamodb/direct/settings.py",
        '        if environ.get(name, "").lower() in TRUE:\n            return f"{name} is set"',
        "        pass",
        DIRECT,
    ),
    (
        "direct path: partition ignored",
        "_stores/dynamodb/direct/settings.py",
        '        url = f"https://{ENDPOINT_PREFIX}.{region}.{_dns_suffix(region)}"',
        '        url = f"https://{ENDPOINT_PREFIX}.{region}.amazonaws.com"',
        DIRECT,
    ),
    (
        "direct path: env creds ignored",
        "_stores/dynamodb/direct/settings.py",
        "    found = EnvProvider(environ=dict(environ)).load()",
        "    found = None",
        DIRECT,
    ),
    (
        "traced: any wrapper taken for a tracer's",
        "_stores/dynamodb/wire/tracers.py",
        "        if wrapper_name(wrapper) not in HONOURED.get(name, ()):",
        "        if False:",
        TRACED,
    ),
    (
        "traced: the fast path skips the tracer's wrapper on _make_api_call",
        "_stores/dynamodb/wire/lean.py",
        "        if wrappers and self._honours_tracers:",
        "        if False:",
        TRACED,
    ),
    (
        "traced: the fast path skips the wrapper on prepare_request (no trace header)",
        "_stores/dynamodb/wire/build.py",
        "        if wrappers:  # a tracer's trace header, put on as around `Endpoint.prepare_request`",
        "        if False:",
        TRACED,
    ),
    (
        "traced: the direct path skips the wrapper on prepare_request",
        "_stores/dynamodb/direct/transport.py",
        "        if wrappers:  # a tracer's trace header, as around `Endpoint.prepare_request`",
        "        if False:",
        TRACED,
    ),
    (
        "traced: a user's before-call hook not called",
        "_stores/dynamodb/wire/lean.py",
        "        if plan.name in verdict.before_call:\n",
        "        if False:\n",
        TRACED,
    ),
    (
        "traced: the self-check's calls traced",
        "_stores/dynamodb/wire/check.py",
        '        twin.__class__ = _untraced_class(type(client), "_make_api_call")\n',
        "",
        TRACED,
    ),
    (
        "traced: a tracer set up after the path was built not seen",
        "_stores/dynamodb/wire/guard.py",
        "        if not self.methods.unchanged() and not self.methods.found_again():",
        "        if False:",
        TRACED,
    ),
    (
        "traced: a call the fast path hands over inside the wrapper traced twice",
        "_stores/dynamodb/wire/lean.py",
        "        if traced:  # inside the tracer's wrapper already",
        "        if False:  # inside the tracer's wrapper already",
        TRACED,
    ),
    (
        "traced: the direct path's stand-in client failing the call",
        "_stores/dynamodb/direct/transport.py",
        "            if made:\n                raise",
        "            if True:\n                raise",
        TRACED,
    ),
    (
        "traced: the placeholder user agent shown to a hook",
        "_stores/dynamodb/wire/guard.py",
        "            if UA_REBUILD in names and operation not in before_call:",
        "            if UA_REBUILD in names:",
        TRACED,
    ),
    (
        "traced: a user's hook's signing choice ignored",
        "_stores/dynamodb/wire/lean.py",
        "            if signing_choice(context) != chosen:",
        "            if False:",
        TRACED,
    ),
    (
        "traced: an unknown patch on the one client not told",
        "_stores/dynamodb/wire/guard.py",
        '                tell_once(f"{patched} patched on the one {type(owner).__name__}")',
        "                pass",
        TRACED,
    ),
    (
        "signing: a retry keeps its previous attempt's Authorization and X-Amz-Date",
        "_stores/dynamodb/wire/sigv4.py",
        "    if present & replaced:  # a retry: the previous attempt's",
        "    if False:",
        SIGNING,
    ),
    (
        "signing: the session token left off",
        "_stores/dynamodb/wire/sigv4.py",
        '        added.append(("X-Amz-Security-Token", token))',
        "        pass",
        SIGNING,
    ),
    (
        "signing: a request with a Date header signed the one-pass way",
        "_stores/dynamodb/wire/sigv4.py",
        '            if "date" in present:',
        "            if False:",
        SIGNING,
    ),
    (
        "signing: a signing step patched since bypassed",
        "_stores/dynamodb/wire/sigv4.py",
        "                or not own.unchanged()\n",
        "",
        SIGNING,
    ),
    (
        "signing: a request's own params left out of the canonical query",
        "_stores/dynamodb/wire/sigv4.py",
        "self.canonical_query_string(request) if request.params else query",
        "query",
        SIGNING,
    ),
    (
        "signing: botocore's DEBUG lines not logged",
        "_stores/dynamodb/wire/sigv4.py",
        "                or logger.isEnabledFor(logging.DEBUG)\n",
        "",
        SIGNING,
    ),
    (
        "signing: the unsigned-headers list read once",
        "_stores/dynamodb/wire/sigv4.py",
        "    blacklist = auth.SIGNED_HEADERS_BLACKLIST\n",
        "    blacklist = _first_blacklist(auth)\n",
        SIGNING,
        (
            "_stores/dynamodb/wire/sigv4.py",
            "    return key  # type: ignore[no-any-return]\n",
            "    return key  # type: ignore[no-any-return]\n\n\n"
            "@functools.cache\n"
            "def _first_blacklist(auth):\n"
            "    return frozenset(auth.SIGNED_HEADERS_BLACKLIST)\n",
        ),
    ),
    (
        "signing: an unsigned X-Amz-Content-SHA256 not read",
        "_stores/dynamodb/wire/sigv4.py",
        '        if lower == "x-amz-content-sha256" and checksum is None:\n',
        '        if lower == "x-amz-content-sha256" and checksum is None and lower not in blacklist:\n',
        SIGNING,
    ),
    (
        "request: a text body a hook set read as it is",
        "_stores/dynamodb/wire/request.py",
        "            if type(data) is bytes and data:\n",
        "            if data:\n",
        SIGNING,
    ),
    (
        "prepare: a header value that is not text prepared the lean way",
        "_stores/dynamodb/wire/request.py",
        "                if not isinstance(value, str):\n"
        "                    return self._prepared_as_botocore_does(items)\n",
        "",
        SIGNING,
    ),
]


def main(only: list[str]) -> int:
    survived = 0
    for index, (name, module, old, new, files, *more) in enumerate(PLANTS):
        if only and str(index) not in only:
            continue
        with tempfile.TemporaryDirectory() as copy:
            shutil.copytree(ROOT / "layer", Path(copy) / "layer")
            for edit_module, edit_old, edit_new in [(module, old, new), *more]:
                path = Path(copy) / "layer" / L / edit_module
                text = path.read_text(encoding="utf-8")
                if text.count(edit_old) != 1:
                    print(f"{index}\t{name}\tnot applied: the code changed")
                    break
                path.write_text(text.replace(edit_old, edit_new), encoding="utf-8")
            else:
                env = dict(os.environ, PYTHONPATH=str(Path(copy) / "layer"))
                command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
                start = time.monotonic()
                run = subprocess.run(
                    [*command, *files],
                    cwd=ROOT,
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                took = time.monotonic() - start
                failed = [
                    line.split("::")[-1].split(" - ")[0]
                    for line in run.stdout.splitlines()
                    if line.startswith(("FAILED tests", "ERROR tests"))
                ]
                caught = run.returncode != 0
                survived += not caught
                verdict = f"caught by {failed[:1]}" if caught else "SURVIVED"
                print(f"{index}\t{name}\t{took:.0f} s\t{verdict}", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
