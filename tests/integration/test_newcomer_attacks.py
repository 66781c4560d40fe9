"""Attacks, from the promises only (a helper who had not seen the code), on three things new
on 2026-11-29.

A. Which store an operator command reads: IDEMPOTENCY_VALKEY_URL where no table is found
   (no --table / doctor TABLE, no IDEMPOTENCY_TABLE, no DynamoDB option, no template.yaml),
   never over a table found any way; a bad URL from the variable is one line, exit 2, no
   password, and says to check IDEMPOTENCY_VALKEY_URL.
B. A Valkey server that does not answer: StoreError naming it with the fix, retryable,
   maybe_applied as the request's fate allows, never the URL's password anywhere.
C. `lambda-idempotency local --valkey [--cluster]` and `local stop --valkey`: a taken port is
   one line naming it with a fix (exit 2, nothing left running), a half-started cluster is
   stopped, a taken bus port does not stop a node, nothing lands in the user's folder.

Found failing when written (19 of 71), each fixed since: the CLI names what gave the URL
(`valkey_stores.named_by`) in every line about it; an empty option counts as given; a template
that names no table (a Valkey project) lets the variable in; doctor refuses the Valkey options
beside a table; `masked` hides all of a query from its password on, and an unknown option after
a password is refused without its name; a cluster client that cannot start names the node
redis-py tried and the fix; `local`'s port check binds as well as connects, a bind lost after
it is one line, and --port is checked to name real ports. What failed:
- A: a malformed URL, and credentials refused, from IDEMPOTENCY_VALKEY_URL never say to
  check IDEMPOTENCY_VALKEY_URL (every command); doctor's "cannot ask Valkey" for an
  unreachable variable does not either; `--table ''` sends `release --yes` to the variable's
  store; a SAM template with no table (a Valkey project) answers "no table" without a word
  of the Valkey options; doctor with --cluster/--prefix beside a table silently checks the
  table (the other commands refuse the flag in one line).
- A/B: a `?password=` holding an unencoded '&' has the rest of the password echoed as an
  option name ("url sets 'Secr3tTail'") and shown unmasked in every URL the CLI prints.
- B: ValkeyStore(url, cluster=True) that cannot connect names neither the address nor the
  fix ("no node answered").
- C: a port bound but not listening (any of a cluster's three) passes the check and then
  fails with valkey-server's whole log (many lines, no fix); --port past 65535 (or a cluster
  whose third port is) and a negative --port end in a traceback.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import lambda_idempotency
from lambda_idempotency import StoreError, ValkeyStore, idempotent
from lambda_idempotency._base import keys as _keys
from lambda_idempotency._dev import cli, valkey_local
from lambda_idempotency._dev.valkey_local import ValkeyCluster, ValkeyServer
from lambda_idempotency._stores.record import Status
from tests.conftest import call_until_the_key_frees
from tests.local_ports import bindable, three_free_ports

pytestmark = [pytest.mark.valkey, pytest.mark.timeout_scale(2)]

LAYER = Path(lambda_idempotency.__file__).resolve().parent.parent
TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
SECRET = "s3cretPw"
MINUTE_MS = 60_000
VAR = "IDEMPOTENCY_VALKEY_URL"


# -- helpers ------------------------------------------------------------------------------------


def crashed_claim(store: ValkeyStore, namespace: str, key: str, lease_ms: int = MINUTE_MS) -> str:
    """A claim a crashed holder left, held `lease_ms` from now: its pk."""
    pk = _keys.key_hash(namespace, None, key)
    now = time.time_ns() // 1_000_000
    won, _ = store.claim(
        pk,
        owner="crashed",
        payload_hash=None,
        now_ms=now,
        lease_until_ms=now + lease_ms,
        expiration_s=now // 1000 + 3600,
    )
    assert won
    return pk


def one_line(err: str) -> None:
    assert err.count("\n") == 1 and err.endswith("\n"), f"not one line: {err!r}"
    assert "Traceback" not in err


def messages_of(exc: BaseException) -> str:
    """str and repr of an error and of every error behind it."""
    seen: list[str] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < 20:
        seen += [str(current), repr(current), repr(getattr(current, "args", ()))]
        current = current.__cause__ or current.__context__
    return "\n".join(seen)


@pytest.fixture
def ops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> Callable[..., tuple[int, str, str]]:
    """The operator commands run in-process from a folder with no template, no table named
    in the environment, and any DynamoDB the commands turn to failing fast (nothing there)."""
    folder = tmp_path / "ops"
    folder.mkdir()
    monkeypatch.chdir(folder)
    for name in ("IDEMPOTENCY_TABLE", VAR, "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:1")

    def run(*argv: str) -> tuple[int, str, str]:
        status = cli.main(list(argv))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


@pytest.fixture
def node_store(valkey_node: ValkeyServer) -> Iterator[ValkeyStore]:
    """The default prefix (what the variable's store reads without --prefix) on the node."""
    store = ValkeyStore(valkey_node.url)
    yield store
    store.close()


def _secured(server: ValkeyServer) -> ValkeyServer:
    admin = redis.Redis(port=server.port)
    admin.config_set("requirepass", SECRET)
    admin.close()
    return server


@pytest.fixture
def secured_node() -> Iterator[ValkeyServer]:
    """A node of this test's own (it may be paused or killed) that asks for SECRET, also on
    a unix socket."""
    folder = tempfile.mkdtemp(prefix="vk-")
    socket_path = os.path.join(folder, "v.sock")
    server = ValkeyServer("--unixsocket", socket_path, "--unixsocketperm", "700")
    server.socket_path = socket_path  # type: ignore[attr-defined]
    with server:
        yield _secured(server)
    for leftover in Path(folder).glob("*"):
        leftover.unlink()
    os.rmdir(folder)


def admin_of(server: ValkeyServer) -> redis.Redis:
    return redis.Redis(port=server.port, password=SECRET)


# == A. which store an operator command reads ===================================================


def test_a_env_url_alone_is_read_by_every_operator_command(
    ops: Callable[..., tuple[int, str, str]],
    valkey_node: ValkeyServer,
    node_store: ValkeyStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    namespace = f"Atk{uuid.uuid4().hex[:6]}.app.handler"
    pk = crashed_claim(node_store, namespace, "o-1")
    monkeypatch.setenv(VAR, valkey_node.url)
    status, out, err = ops("namespaces")
    assert status == 0 and f"{namespace}  1 record" in out, err
    status, out, err = ops("stuck", "--older-than", "0", "--json")
    assert status == 0 and pk in out, err
    status, out, err = ops("inspect", "--pk", pk)
    assert status == 0 and "IN_PROGRESS" in out, err
    status, out, err = ops("doctor")
    assert out.startswith("valkey redis://127.0.0.1:"), (status, out, err)
    status, out, err = ops("release", "--pk", pk, "--yes", "--force")
    assert status == 0, err
    record = node_store.get(pk)
    assert record is not None and record.status is Status.RELEASED


DYNAMODB_OPTIONS = [
    ["--table", "orders-idem"],
    ["--endpoint", "http://127.0.0.1:1"],
    ["--region", "us-east-1"],
    ["--profile", "no-such-profile-here"],
    ["--layout", "powertools"],
    ["--sort-key-attr", "sk"],
    ["--key-attr", "id"],
    ["--expiry-attr", "ttl"],
    ["--layout", "powertools", "--hash-function", "md5"],
]


@pytest.mark.parametrize("options", DYNAMODB_OPTIONS, ids=lambda o: "_".join(o).strip("-"))
def test_a_a_dynamodb_option_keeps_release_off_the_variables_store(
    options: list[str],
    ops: Callable[..., tuple[int, str, str]],
    valkey_node: ValkeyServer,
    node_store: ValkeyStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """release WRITES: with a table named by any DynamoDB option, the variable's store must
    not be touched (the DynamoDB here answers nothing, so the command fails)."""
    pk = crashed_claim(node_store, f"Atk{uuid.uuid4().hex[:6]}.h", "o-1")
    monkeypatch.setenv(VAR, valkey_node.url)
    status, out, err = ops("release", "--pk", pk, "--yes", "--force", *options)
    assert status != 0 and valkey_node.url not in out + err, (status, out, err)
    record = node_store.get(pk)
    assert record is not None and record.status is Status.IN_PROGRESS
    assert record.owner == "crashed"
    status, out, err = ops("namespaces", *options)
    assert status != 0 and valkey_node.url not in out + err, (out, err)


@pytest.mark.parametrize(
    "where",
    ["IDEMPOTENCY_TABLE", "template.yaml", "--template before", "--template after", "doctor TABLE"],
)
def test_a_a_table_found_any_other_way_is_read_not_the_variable(
    where: str,
    ops: Callable[..., tuple[int, str, str]],
    valkey_node: ValkeyServer,
    node_store: ValkeyStore,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    pk = crashed_claim(node_store, f"Atk{uuid.uuid4().hex[:6]}.h", "o-1")
    monkeypatch.setenv(VAR, valkey_node.url)
    before: list[str] = []
    after: list[str] = []
    command = ["release", "--pk", pk, "--yes", "--force"]
    if where == "IDEMPOTENCY_TABLE":
        monkeypatch.setenv("IDEMPOTENCY_TABLE", "orders-idem")
    elif where == "template.yaml":
        Path("template.yaml").write_text(TEMPLATE.read_text(encoding="utf-8"), encoding="utf-8")
    elif where.startswith("--template"):
        elsewhere = tmp_path / "project" / "template.yaml"
        elsewhere.parent.mkdir()
        elsewhere.write_text(TEMPLATE.read_text(encoding="utf-8"), encoding="utf-8")
        (before if where.endswith("before") else after).extend(["--template", str(elsewhere)])
    else:
        command = ["doctor", "orders-idem"]
    status, out, err = ops(*before, *command, *after)
    assert status != 0 and valkey_node.url not in out + err, (out, err)
    record = node_store.get(pk)
    assert record is not None and record.status is Status.IN_PROGRESS
    if where != "doctor TABLE":
        status, out, err = ops(*before, "doctor", *after)
        assert status != 0 and valkey_node.url not in out + err, (status, out, err)


def test_a_cluster_and_prefix_beside_a_table_are_one_line(
    ops: Callable[..., tuple[int, str, str]],
    valkey_node: ValkeyServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VAR, valkey_node.url)
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "orders-idem")
    for flag in (["--cluster"], ["--prefix", "p:"]):
        status, out, err = ops("release", "--pk", "x#y", "--yes", *flag)
        assert status == 2 and out == "", err
        one_line(err)
        assert flag[0] in err


def test_a_an_empty_table_option_does_not_send_release_to_the_variables_store(
    ops: Callable[..., tuple[int, str, str]],
    valkey_node: ValkeyServer,
    node_store: ValkeyStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`release --table "$TABLE"` with TABLE unset in a script: --table was given, so no
    Valkey store may be written (the promise: no --table, else the table)."""
    pk = crashed_claim(node_store, f"Atk{uuid.uuid4().hex[:6]}.h", "o-1")
    monkeypatch.setenv(VAR, valkey_node.url)
    status, out, err = ops("release", "--table", "", "--pk", pk, "--yes", "--force")
    record = node_store.get(pk)
    assert record is not None and record.status is Status.IN_PROGRESS, (
        f"--table '' released the record in {valkey_node.url}: {status} {out!r} {err!r}"
    )
    # the table's path answers (which table?), not a refusal of a --valkey-url never given
    assert status == 2 and "which table?" in err and "not with --valkey-url" not in err, err


def test_a_empty_variables_are_as_unset(
    ops: Callable[..., tuple[int, str, str]],
    valkey_node: ValkeyServer,
    node_store: ValkeyStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VAR, "")
    status, out, err = ops("namespaces")
    assert status == 2 and out == "" and "which table?" in err, err
    one_line(err)
    namespace = f"Atk{uuid.uuid4().hex[:6]}.h"
    crashed_claim(node_store, namespace, "o-1")
    monkeypatch.setenv(VAR, valkey_node.url)
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "")
    status, out, err = ops("namespaces")
    assert status == 0 and namespace in out, (status, out, err)


VALKEY_SAM_TEMPLATE = """\
AWSTemplateFormatVersion: '2010-09-09'
Transform: AWS::Serverless-2016-10-31
Resources:
  OrderFunction:
    Type: AWS::Serverless::Function
    Properties:
      Handler: app.handler
      Runtime: python3.12
      CodeUri: src/
      Environment:
        Variables:
          IDEMPOTENCY_VALKEY_URL: redis://cache.example.com:6379
"""


def test_a_a_sam_project_on_valkey_is_told_of_the_valkey_options(
    ops: Callable[..., tuple[int, str, str]],
    valkey_node: ValkeyServer,
    node_store: ValkeyStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SAM project whose functions use ValkeyStore (its template has no table), after
    `eval "$(lambda-idempotency local --valkey --print-env)"`: no table is found, so the
    command reads the variable's store, or at least its "no table" line names the way."""
    namespace = f"Atk{uuid.uuid4().hex[:6]}.h"
    crashed_claim(node_store, namespace, "o-1")
    Path("template.yaml").write_text(VALKEY_SAM_TEMPLATE, encoding="utf-8")
    monkeypatch.setenv(VAR, valkey_node.url)
    status, out, err = ops("namespaces")
    assert status == 0 and namespace in out, f"the variable's store not read: {err!r}"
    monkeypatch.delenv(VAR)
    status, out, err = ops("namespaces")
    assert status == 2 and "--valkey-url" in err and VAR in err, err


def test_a_cluster_and_prefix_go_with_the_variables_url(
    ops: Callable[..., tuple[int, str, str]],
    valkey_cluster: ValkeyCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix = f"atk-{uuid.uuid4().hex[:6]}:"
    store = ValkeyStore(valkey_cluster.url, cluster=True, prefix=prefix)
    try:
        for n in range(12):
            crashed_claim(store, "Atk.cluster.h", f"o-{n}")
        monkeypatch.setenv(VAR, valkey_cluster.url)
        status, out, err = ops("namespaces", "--cluster", "--prefix", prefix)
        assert (status, out) == (0, "Atk.cluster.h  12 records\n"), err
        status, out, err = ops("namespaces", "--prefix", prefix)
        assert status == 2 and "add --cluster" in err and out == "", err
        one_line(err)
    finally:
        store.close()


def test_a_the_variable_alone_in_a_subprocess(
    valkey_node: ValkeyServer, node_store: ValkeyStore, tmp_path: Path
) -> None:
    namespace = f"Atk{uuid.uuid4().hex[:6]}.h"
    runs: list[str] = []

    @idempotent(store=node_store, key="order_id", namespace=namespace, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(event["order_id"])
        return "ok"

    handler({"order_id": "o-7"}, None)
    env = {k: v for k, v in os.environ.items() if k != "IDEMPOTENCY_TABLE"}
    env.update({VAR: valkey_node.url, "PYTHONPATH": str(LAYER)})
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lambda_idempotency",
            "inspect",
            "--key",
            "o-7",
            "--namespace",
            namespace,
            "--result",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "COMPLETED" in done.stdout, done.stderr
    assert runs == ["o-7"]


MALFORMED = [
    f"http://u:{SECRET}@127.0.0.1:6379",
    f"redis://:{SECRET}@127.0.0.1:0",
    f"redis://:{SECRET}@127.0.0.1:6379?timeout=3",
    f"redis://:{SECRET}@127.0.0.1:99999",
    f"redis://:{SECRET}@127.0.0.1:6379/notadb",
]


@pytest.mark.parametrize("url", MALFORMED, ids=["scheme", "port0", "option", "bigport", "db"])
def test_a_a_malformed_variable_says_check_the_variable(
    url: str, ops: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VAR, url)
    for command in (
        ["namespaces"],
        ["stuck"],
        ["inspect", "--pk", "a#b"],
        ["release", "--pk", "a#b", "--yes"],
        ["doctor"],
    ):
        status, out, err = ops(*command)
        assert status == 2 and out == "", (command, err)
        one_line(err)
        assert SECRET not in err
        assert VAR in err, f"{command[0]}: {err.strip()}"


def test_a_credentials_refused_from_the_variable_say_check_the_variable(
    ops: Callable[..., tuple[int, str, str]],
    secured_node: ValkeyServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrong = "wr0ngPw"
    monkeypatch.setenv(VAR, f"redis://someone:{wrong}@127.0.0.1:{secured_node.port}")
    for command in (["namespaces"], ["stuck"], ["release", "--pk", "a#b", "--yes"], ["doctor"]):
        status, out, err = ops(*command)
        assert status == 2 and out == "", (command, err)
        one_line(err)
        assert wrong not in err
        assert VAR in err, f"{command[0]}: {err.strip()}"


def test_a_doctor_on_an_unreachable_variable_says_check_the_variable(
    ops: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VAR, f"redis://:{SECRET}@127.0.0.1:1")
    status, out, err = ops("doctor")
    assert status == 2 and out == "", err
    one_line(err)
    assert SECRET not in err and "***" in err
    assert VAR in err, err.strip()


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{SECRET}@127.0.0.1:1",
        f"redis://user:{SECRET[:3]}%40{SECRET[3:]}@127.0.0.1:1",
        f"redis://127.0.0.1:1?password={SECRET}",
        f"unix://:{SECRET}@/nonexistent-dir-atk/v.sock",
        f"unix:///nonexistent-dir-atk/v.sock?password={SECRET}",
        f"rediss://user:{SECRET}@127.0.0.1:1",
    ],
    ids=["userinfo", "percent", "query", "unix-userinfo", "unix-query", "rediss"],
)
def test_a_an_unreachable_variable_is_one_masked_line(
    url: str, ops: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VAR, url)
    for command in (
        ["namespaces"],
        ["stuck"],
        ["inspect", "--pk", "a#b"],
        ["release", "--pk", "a#b", "--yes", "--force"],
    ):
        status, out, err = ops(*command)
        assert status == 2 and out == "", (command, err)
        one_line(err)
        secret_bits = (SECRET, SECRET[:3] + "%40", SECRET[3:])
        assert not any(bit in err for bit in secret_bits), err
        assert "***" in err and VAR in err, err


def test_a_an_ampersand_in_a_query_password_is_never_shown(
    ops: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`?password=Sup3r&Secr3tTail` (an '&' left unencoded, as a generated password may hold)
    from the variable: no line may show any piece of the password."""
    monkeypatch.setenv(VAR, "redis://127.0.0.1:1?password=Sup3r&Secr3tTail")
    for command in (["namespaces"], ["doctor"]):
        status, out, err = ops(*command)
        assert status == 2 and out == "", err
        one_line(err)
        assert "Sup3r" not in err and "Secr3tTail" not in err, err


def test_a_doctor_refuses_cluster_and_prefix_beside_a_table_as_the_others_do(
    ops: Callable[..., tuple[int, str, str]],
    valkey_node: ValkeyServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """inspect/release/... answer `--cluster` or `--prefix` beside a table with one line
    ("--cluster is for a Valkey store"); doctor, asked to check a Valkey cluster where a
    table is found, must not silently check the table instead."""
    monkeypatch.setenv(VAR, valkey_node.url)
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "orders-idem")
    for flag in (["--cluster"], ["--prefix", "p:"]):
        status, out, err = ops("doctor", *flag)
        assert status == 2 and out == "", err
        one_line(err)
        assert flag[0] in err, f"doctor {flag[0]} beside a table: {err.strip()}"


@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_a_a_password_in_the_variable_shows_in_no_line_of_a_working_command(
    form: str,
    ops: Callable[..., tuple[int, str, str]],
    secured_node: ValkeyServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = (
        f"redis://:{SECRET}@127.0.0.1:{secured_node.port}"
        if form == "userinfo"
        else f"redis://127.0.0.1:{secured_node.port}?password={SECRET}"
    )
    store = ValkeyStore(url)
    pk = crashed_claim(store, "Atk.pw", "a", lease_ms=1)
    store.close()
    time.sleep(0.05)
    monkeypatch.setenv(VAR, url)
    for command in (
        ["namespaces", "--json"],
        ["stuck", "--older-than", "0"],
        ["stuck", "--older-than", "0", "--json"],
        ["inspect", "--pk", pk, "--json"],
        ["inspect", "--pk", "Atk.pw#nothere"],
        ["release", "--pk", pk],
        ["doctor"],
        ["doctor", "--json"],
        ["release", "--pk", pk, "--yes"],
    ):
        _status, out, err = ops(*command)
        assert SECRET not in out + err, (command, out, err)
        assert "Traceback" not in err
    record = admin_of(secured_node).hgetall(f"idempotency:{{{pk}}}")
    assert record, "the release found nothing to write"


# == B. a server that does not answer ===========================================================


UNREACHABLE = [
    (f"redis://:{SECRET}@127.0.0.1:1", "127.0.0.1:1"),
    (f"redis://u:{SECRET[:3]}%2F{SECRET[3:]}@127.0.0.1:1", "127.0.0.1:1"),
    (f"redis://127.0.0.1:1?password={SECRET}", "127.0.0.1:1"),
    (f"valkey://127.0.0.1:1?username=u&password={SECRET}", "127.0.0.1:1"),
    (f"unix://:{SECRET}@/nonexistent-dir-atk/v.sock", "/nonexistent-dir-atk/v.sock"),
    (f"unix:///nonexistent-dir-atk/v.sock?password={SECRET}", "/nonexistent-dir-atk/v.sock"),
    (f"rediss://u:{SECRET}@127.0.0.1:1", "127.0.0.1:1"),
]


def _no_secret(text: str) -> None:
    for bit in (SECRET, SECRET[:3] + "%2F", SECRET[3:]):
        assert bit not in text, f"the password shows: {text[:500]!r}"


@pytest.mark.parametrize(
    "url,address",
    UNREACHABLE,
    ids=["userinfo", "percent", "query", "valkey-query", "unix-userinfo", "unix-query", "rediss"],
)
def test_b_every_step_on_nothing_names_it_with_the_fix_and_no_password(
    url: str, address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    store = ValkeyStore(url, prefix="atk:", timeout=0.5)
    runs: list[str] = []

    @idempotent(store=store, key="k", namespace="Atk.b", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(event["k"])
        return "ran"

    failures: list[StoreError] = []
    now = time.time_ns() // 1_000_000
    steps: list[Callable[[], Any]] = [
        lambda: handler({"k": "a"}, None),
        lambda: store.get(_keys.key_hash("Atk.b", None, "a")),
        lambda: list(store.scan_stuck(claimed_before_ms=now, now_ms=now)),
    ]
    try:
        for step in steps:
            with pytest.raises(StoreError) as caught:
                step()
            failures.append(caught.value)
    finally:
        store.close()
    assert runs == []
    for failure in failures:
        text = str(failure)
        assert address in text and "start a server" in text, text
        assert failure.retryable is True and failure.maybe_applied is False, text
        _no_secret(messages_of(failure))
    _no_secret("\n".join(r.getMessage() for r in caplog.records))
    _no_secret(repr(store))


@pytest.mark.parametrize(
    "url",
    [f"redis://:{SECRET}@127.0.0.1:1", f"redis://127.0.0.1:1?password={SECRET}"],
    ids=["userinfo", "query"],
)
def test_b_a_cluster_store_on_nothing_names_it_with_the_fix(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    store = ValkeyStore(url, cluster=True, prefix="atk:", timeout=0.5)
    failure, runs = _first_call_fails(store, "Atk.bc")
    assert runs == []
    _no_secret(messages_of(failure))
    _no_secret("\n".join(r.getMessage() for r in caplog.records))
    assert failure.retryable is True and failure.maybe_applied is False
    assert "127.0.0.1:1" in str(failure) and "start a server" in str(failure), str(failure)


def test_b_an_ampersand_in_a_query_password_is_never_shown_by_the_store() -> None:
    url = "redis://127.0.0.1:1?password=Sup3r&Secr3tTail"
    try:
        store = ValkeyStore(url)
    except Exception as exc:  # refused: its message must not carry the password's pieces
        text = messages_of(exc)
    else:
        text = repr(store)
        store.close()
    assert "Sup3r" not in text and "Secr3tTail" not in text, text


def _secured_urls(server: ValkeyServer) -> list[str]:
    return [
        f"redis://:{SECRET}@127.0.0.1:{server.port}",
        f"redis://127.0.0.1:{server.port}?password={SECRET}",
        f"unix://:{SECRET}@{server.socket_path}",  # type: ignore[attr-defined]
    ]


@pytest.mark.parametrize("form", [0, 1, 2], ids=["userinfo", "query", "unix"])
def test_b_a_claim_that_timed_out_on_a_paused_server_may_have_landed(
    form: int, secured_node: ValkeyServer, caplog: pytest.LogCaptureFixture
) -> None:
    """timeout=0.2 on a server SIGSTOPped after the connection is up: the claim left, so
    maybe_applied must be True, and it did land (seen once the server resumes). The body
    never ran; once the lease lapses the retry runs it once, and then it replays."""
    caplog.set_level(logging.DEBUG)
    store = ValkeyStore(_secured_urls(secured_node)[form], prefix="atk:", timeout=0.2)
    runs: list[str] = []

    @idempotent(
        store=store, key="k", namespace="Atk.p", cache_size=0, lease_seconds=1, clock_skew_seconds=0
    )
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(event["k"])
        return len(runs)

    try:
        assert handler({"k": "warm"}, None) == 1
        secured_node.pause()
        try:
            with pytest.raises(StoreError) as caught:
                handler({"k": "a"}, None)
        finally:
            secured_node.resume()
        failure = caught.value
        assert failure.retryable is True and failure.maybe_applied is True, str(failure)
        _no_secret(messages_of(failure))
        pk = _keys.key_hash("Atk.p", None, "a")
        deadline = time.monotonic() + 3
        while (record := store.get(pk)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert record is not None and record.status is Status.IN_PROGRESS  # it had landed
        assert runs == ["warm"]
        assert call_until_the_key_frees(handler, {"k": "a"}) == 2
        assert handler({"k": "a"}, None) == 2
        assert runs == ["warm", "a"]
        final = store.get(pk)
        assert final is not None and final.status is Status.COMPLETED
    finally:
        store.close()
    _no_secret("\n".join(r.getMessage() for r in caplog.records))


def test_b_a_completion_that_timed_out_lands_and_replays(secured_node: ValkeyServer) -> None:
    store = ValkeyStore(_secured_urls(secured_node)[0], prefix="atk:", timeout=0.2)
    runs: list[str] = []
    pause_in_body = {"on": False}

    @idempotent(
        store=store, key="k", namespace="Atk.c", cache_size=0, lease_seconds=1, clock_skew_seconds=0
    )
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(event["k"])
        if pause_in_body["on"]:
            secured_node.pause()
        return len(runs)

    try:
        handler({"k": "warm"}, None)
        pause_in_body["on"] = True
        try:
            first: Any = handler({"k": "a"}, None)
        except StoreError as exc:
            first = exc
            _no_secret(messages_of(exc))
        finally:
            secured_node.resume()
        pause_in_body["on"] = False
        time.sleep(0.3)
        again = call_until_the_key_frees(handler, {"k": "a"})
        assert runs == ["warm", "a"], f"the body ran again: {runs} (first call: {first!r})"
        assert again == 2
        record = store.get(_keys.key_hash("Atk.c", None, "a"))
        assert record is not None and record.status is Status.COMPLETED
    finally:
        store.close()


def test_b_a_server_killed_with_the_claim_in_flight(
    secured_node: ValkeyServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    store = ValkeyStore(_secured_urls(secured_node)[0], prefix="atk:", timeout=3)
    runs: list[str] = []

    @idempotent(store=store, key="k", namespace="Atk.k", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(event["k"])
        return "ran"

    try:
        handler({"k": "warm"}, None)
        secured_node.pause()
        killer = threading.Timer(0.4, secured_node.kill)
        killer.start()
        with pytest.raises(StoreError) as caught:
            handler({"k": "a"}, None)
        killer.join()
        failure = caught.value
        assert failure.retryable is True and failure.maybe_applied is True, str(failure)
        _no_secret(messages_of(failure))
        assert runs == ["warm"]
        with pytest.raises(StoreError) as later:  # now nothing answers at all
            handler({"k": "b"}, None)
        assert later.value.maybe_applied is False and "start a server" in str(later.value)
        _no_secret(messages_of(later.value))
    finally:
        store.close()
    _no_secret("\n".join(r.getMessage() for r in caplog.records))


def test_b_a_waiter_whose_server_dies_gets_the_fix_and_runs_nothing(
    secured_node: ValkeyServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    store = ValkeyStore(_secured_urls(secured_node)[2], prefix="atk:", timeout=1)
    runs: list[str] = []

    @idempotent(
        store=store,
        key="k",
        namespace="Atk.w",
        cache_size=0,
        on_in_progress="wait",
        max_wait_seconds=5,
    )
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(event["k"])
        return "ran"

    try:
        crashed_claim(store, "Atk.w", "a")
        killer = threading.Timer(0.6, secured_node.kill)
        killer.start()
        started = time.monotonic()
        with pytest.raises(StoreError) as caught:
            handler({"k": "a"}, None)
        killer.join()
        assert time.monotonic() - started < 4
    finally:
        store.close()
    assert runs == []
    failure = caught.value
    assert failure.retryable is True and failure.maybe_applied is False, str(failure)
    assert "start a server" in str(failure), str(failure)
    _no_secret(messages_of(failure))
    _no_secret("\n".join(r.getMessage() for r in caplog.records))


def test_b_reads_on_a_paused_server_time_out_unapplied(secured_node: ValkeyServer) -> None:
    store = ValkeyStore(_secured_urls(secured_node)[1], prefix="atk:", timeout=0.2)
    try:
        store.get(_keys.key_hash("Atk.r", None, "warm"))
        secured_node.pause()
        now = time.time_ns() // 1_000_000
        try:
            for read in (
                lambda: store.get(_keys.key_hash("Atk.r", None, "a")),
                lambda: list(store.scan_stuck(claimed_before_ms=now, now_ms=now)),
            ):
                started = time.monotonic()
                with pytest.raises(StoreError) as caught:
                    read()
                assert time.monotonic() - started < 2
                assert caught.value.retryable is True and caught.value.maybe_applied is False
                _no_secret(messages_of(caught.value))
        finally:
            secured_node.resume()
    finally:
        store.close()


def test_b_a_wrong_password_claims_nothing_and_shows_nothing(
    secured_node: ValkeyServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "wr0ngPw"
    store = ValkeyStore(f"redis://:{wrong}@127.0.0.1:{secured_node.port}", prefix="atkw:")
    failure, runs = _first_call_fails(store, "Atk.wp")
    assert runs == [] and failure.maybe_applied is False
    assert wrong not in messages_of(failure)
    assert wrong not in "\n".join(r.getMessage() for r in caplog.records)
    admin = admin_of(secured_node)
    assert admin.keys("atkw:*") == []
    admin.close()


def test_b_operator_commands_on_a_killed_server_one_masked_line(
    secured_node: ValkeyServer, ops: Callable[..., tuple[int, str, str]]
) -> None:
    url = _secured_urls(secured_node)[1]
    store = ValkeyStore(url, prefix="atko:")
    pk = crashed_claim(store, "Atk.o", "a")
    store.close()
    status, out, err = ops("inspect", "--valkey-url", url, "--prefix", "atko:", "--pk", pk)
    assert status == 0 and "IN_PROGRESS" in out, err
    secured_node.kill()
    for command in ("namespaces", "stuck", "doctor"):
        status, out, err = ops(command, "--valkey-url", url, "--prefix", "atko:")
        assert status == 2 and out == "", err
        one_line(err)
        assert SECRET not in err and "***" in err, err
    status, out, err = ops(
        "release", "--valkey-url", url, "--prefix", "atko:", "--pk", pk, "--yes", "--force"
    )
    assert status == 2 and SECRET not in err, err
    one_line(err)


def _first_call_fails(store: ValkeyStore, namespace: str) -> tuple[StoreError, list[str]]:
    """A decorated call's StoreError on `store` (closed after), and the bodies that ran."""
    runs: list[str] = []

    @idempotent(store=store, key="k", namespace=namespace, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(event["k"])
        return "ran"

    try:
        with pytest.raises(StoreError) as caught:
            handler({"k": "a"}, None)
    finally:
        store.close()
    return caught.value, runs


# == C. local --valkey =========================================================================


@pytest.fixture
def port() -> int:
    """Three free ports in a row below the ephemeral range."""
    return three_free_ports()


@pytest.fixture
def user(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    folder = tmp_path / "project"
    folder.mkdir()
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(LAYER))
    env.pop(VAR, None)
    return folder, env


def local(user: tuple[Path, dict[str, str]], *argv: str) -> subprocess.CompletedProcess[str]:
    folder, env = user
    return subprocess.run(
        [sys.executable, "-m", "lambda_idempotency", "local", *argv],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def valkey_pids_on(*ports: int) -> list[int]:
    pids: list[int] = []
    for p in ports:
        found = subprocess.run(
            ["pgrep", "-f", f"valkey-server 127.0.0.1:{p}( |$)"],
            capture_output=True,
            text=True,
            check=False,
        )
        pids += [int(pid) for pid in found.stdout.split()]
    return pids


def _nothing_left(user: tuple[Path, dict[str, str]], *ports: int) -> None:
    assert valkey_pids_on(*ports) == [], "a node was left running"
    assert bindable(*ports), "a port was left taken"
    assert list(user[0].iterdir()) == [], "something was written into the user's folder"


def _cleanup(user: tuple[Path, dict[str, str]], port: int, *ports: int) -> None:
    local(user, "stop", "--valkey", "--port", str(port))
    for pid in valkey_pids_on(*ports):  # ours, by the ports we picked
        os.kill(pid, 9)


def _error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.startswith("lambda-idempotency:")]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_c_a_listening_port_of_three_is_one_line_and_nothing_starts(
    which: int, user: tuple[Path, dict[str, str]], port: int
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port + which))
        squatter.listen()
        done = local(user, "--valkey", "--cluster", "--print-env", "--port", str(port))
    try:
        assert done.returncode == 2 and done.stdout == "", done
        assert "Traceback" not in done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert str(port + which) in done.stderr and "--port" in done.stderr
        _nothing_left(user, port, port + 1, port + 2)
    finally:
        _cleanup(user, port, port, port + 1, port + 2)


@pytest.mark.parametrize("cluster", [False, True], ids=["node", "cluster"])
def test_c_a_bound_but_not_listening_port_is_one_line_naming_it_with_a_fix(
    cluster: bool, user: tuple[Path, dict[str, str]], port: int
) -> None:
    """A socket bound to the port without listen() (a client's, a server not yet started):
    the check by connecting misses it; valkey-server's bind then fails."""
    taken = port + 2 if cluster else port
    flags = ["--cluster"] if cluster else []
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        done = local(user, "--valkey", *flags, "--print-env", "--port", str(port))
    try:
        assert done.returncode == 2 and done.stdout == "", done
        assert "Traceback" not in done.stderr
        line = _error_line(done)
        assert str(taken) in line and "--port" in line, line
        # found before anything starts: no "starting ..." line, no node to stop
        assert done.stderr.count("\n") == 1, f"not one line: {done.stderr!r}"
    finally:
        _cleanup(user, port, port, port + 1, port + 2)


@pytest.mark.parametrize("background", [True, False], ids=["background", "foreground"])
def test_c_a_cluster_failing_part_way_stops_every_node(
    background: bool, user: tuple[Path, dict[str, str]], port: int
) -> None:
    mode = ["--background"] if background else []
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port + 2))  # not listening: the first two nodes start
        done = local(user, "--valkey", "--cluster", *mode, "--port", str(port))
        assert done.returncode != 0, done
        assert valkey_pids_on(port, port + 1) == [], "a node of the half-made cluster runs on"
    try:
        _nothing_left(user, port, port + 1, port + 2)
        assert "Traceback" not in done.stderr
    finally:
        _cleanup(user, port, port, port + 1, port + 2)


@pytest.mark.parametrize(
    "argv",
    [["--cluster", "--port", "65534"], ["--port", "70000"], ["--port", "-3"]],
    ids=["cluster-past-65535", "70000", "-3"],
)
def test_c_a_port_out_of_range_is_one_line(
    argv: list[str], user: tuple[Path, dict[str, str]]
) -> None:
    done = local(user, "--valkey", "--print-env", *argv)
    assert done.returncode == 2 and done.stdout == "", done.stderr[-300:]
    assert "Traceback" not in done.stderr, done.stderr[-300:]
    assert done.stderr.count("\n") <= 1, done.stderr
    assert list(user[0].iterdir()) == []


def test_c_stop_with_nothing_started_is_one_line(
    user: tuple[Path, dict[str, str]], port: int
) -> None:
    for argv in (
        ["stop", "--valkey", "--port", str(port)],
        ["stop", "--valkey", "--cluster", "--port", str(port)],
    ):
        done = local(user, *argv)
        assert done.returncode != 0 and done.stdout == "", done
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert list(user[0].iterdir()) == []


def test_c_a_background_cluster_runs_once_and_stops_clean(
    user: tuple[Path, dict[str, str]], port: int
) -> None:
    done = local(user, "--valkey", "--cluster", "--print-env", "--port", str(port))
    try:
        assert done.returncode == 0, done.stderr
        url = done.stdout.strip().partition("=")[2]
        assert url == f"redis://127.0.0.1:{port}"
        assert len(valkey_pids_on(port, port + 1, port + 2)) == 3
        # a standalone asked for on the cluster's port: refused in one line, cluster untouched
        wrong = local(user, "--valkey", "--print-env", "--port", str(port))
        assert wrong.returncode == 2 and wrong.stdout == "", wrong
        assert wrong.stderr.count("\n") == 1
        store = ValkeyStore(url, cluster=True, prefix="atkc:")
        runs: list[int] = []

        @idempotent(store=store, key="n", namespace="Atk.lc", cache_size=0)
        def handler(event: dict[str, Any], context: Any) -> int:
            runs.append(event["n"])
            return int(event["n"])

        assert [handler({"n": n}, None) for n in range(9)] == list(range(9))
        assert [handler({"n": n}, None) for n in range(9)] == list(range(9))
        assert runs == list(range(9))
        store.close()
        stopped = local(user, "stop", "--valkey", "--port", str(port))
        assert stopped.returncode == 0, stopped
        _nothing_left(user, port, port + 1, port + 2)
    finally:
        _cleanup(user, port, port, port + 1, port + 2)


def test_c_taken_bus_ports_do_not_stop_fixed_port_nodes(
    port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every node's first bus port pick is taken by someone else (listening) between the pick
    and the bind: all three still start on their fixed ports and serve."""
    real = valkey_local.free_port
    squatters = []
    for _ in range(3):
        squatter = socket.socket()
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        squatters.append(squatter)
    taken = [s.getsockname()[1] for s in squatters]
    # each node's first pick is taken, its retry's pick is free: t0, free, t1, free, t2, free
    picks = iter([taken[0], None, taken[1], None, taken[2]])
    monkeypatch.setattr(valkey_local, "free_port", lambda: next(picks, None) or real())
    try:
        with ValkeyCluster(size=3, port=port) as cluster:
            assert [n.port for n in cluster.nodes] == [port, port + 1, port + 2]
            assert not {n.cluster_port for n in cluster.nodes} & set(taken)
            store = ValkeyStore(cluster.url, cluster=True, prefix="atkb:")
            runs: list[str] = []

            @idempotent(store=store, key="k", namespace="Atk.bus", cache_size=0)
            def handler(event: dict[str, Any], context: Any) -> str:
                runs.append(event["k"])
                return event["k"]

            assert [handler({"k": k}, None) for k in "abcab"] == list("abcab")
            assert runs == list("abc")
            store.close()
    finally:
        for squatter in squatters:
            squatter.close()
    assert valkey_pids_on(port, port + 1, port + 2) == []
    assert bindable(port, port + 1, port + 2)


def test_c_print_env_output_is_only_the_export_line(
    user: tuple[Path, dict[str, str]], port: int
) -> None:
    done = local(user, "--valkey", "--print-env", "--port", str(port))
    try:
        assert done.returncode == 0, done.stderr
        assert re.fullmatch(rf"export {VAR}=redis://127\.0\.0\.1:{port}\n", done.stdout)
        again = local(user, "--valkey", "--print-env", "--port", str(port))
        assert again.stdout == done.stdout and again.returncode == 0
        assert len(valkey_pids_on(port)) == 1
        stopped = local(user, "stop", "--valkey", "--port", str(port))
        assert stopped.returncode == 0
        _nothing_left(user, port)
        gone = local(user, "stop", "--valkey", "--port", str(port))
        assert gone.returncode != 0 and gone.stderr.count("\n") == 1
    finally:
        _cleanup(user, port, port)
