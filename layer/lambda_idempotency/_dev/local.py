"""`lambda-idempotency local`: DynamoDB Local on a fixed port with the template's tables.

The README's local lines name `http://127.0.0.1:8000`; this is what answers there. In the
foreground it runs until Ctrl-C; `--background` leaves it running detached, its pid in
`.tools/` beside the template, and `local stop` ends it.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

from .dynamodb_local import DynamoDBLocal, DynamoDBLocalError
from .template import Template

DEFAULT_PORT = 8000


def endpoint_for(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def pid_file(template: Path, port: int) -> Path:
    """Beside the template, in the project's (git-ignored) .tools folder."""
    return Path(template).resolve().parent / ".tools" / f"dynamodb-local-{port}.pid"


def jar_home(template: Path) -> Path | None:
    """DYNAMODB_LOCAL_HOME, else the one `make setup` installed in the project, else None
    (the user's cache)."""
    if os.environ.get("DYNAMODB_LOCAL_HOME"):
        return Path(os.environ["DYNAMODB_LOCAL_HOME"])
    project = Path(template).resolve().parent / ".tools" / "dynamodb-local"
    return project if project.is_dir() else None


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def start(template_path: Path, port: int, *, background: bool) -> int:
    from .cli import create_table, local_client

    template = Template(template_path)
    if _port_in_use(port):
        running = pid_file(template_path, port).exists()
        raise DynamoDBLocalError(
            f"port {port} is in use"
            + (
                f" by DynamoDB Local started earlier: stop it with `lambda-idempotency local stop"
                f"{_port_flag(port)}`"
                if running
                else f": free it, or pick another with `lambda-idempotency local --port {port + 1}`"
            )
        )
    print(f"starting DynamoDB Local on port {port} ...", flush=True)
    local = DynamoDBLocal(home=jar_home(template_path), port=port, detached=background)
    local.start()
    try:
        client = local_client(local.endpoint_url)
        for table in template.tables():
            create_table(client, table)
            ttl = f", TTL on {table.ttl_attribute}" if table.ttl_attribute else ""
            print(f"table {table.name} created{ttl}")
    except BaseException:
        local.stop()
        raise
    print(f"\nDynamoDB Local at {local.endpoint_url} (in memory: everything goes when it stops)")
    print(_usage(template, local.endpoint_url))
    if background:
        assert local.pid is not None
        path = pid_file(template_path, port)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{local.pid}\n", encoding="utf-8")
        print(f"running in the background (pid {local.pid}); stop it with:")
        print(f"  lambda-idempotency local stop{_port_flag(port)}")
        return 0
    return _run_until_interrupted(local)


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


def stop(template_path: Path, port: int) -> int:
    path = pid_file(template_path, port)
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


def _usage(template: Template, endpoint: str) -> str:
    """The lines that use it, with a real function and event of the template when there is one."""
    lines = ["use it with --endpoint, e.g.:"]
    example = _example_invoke(template)
    if example is not None:
        lines.append(f"  lambda-idempotency invoke {example} --endpoint {endpoint}")
    lines.append(f"  lambda-idempotency stuck --endpoint {endpoint}")
    lines.append(f"or point boto3 at it: export AWS_ENDPOINT_URL_DYNAMODB={endpoint}")
    return "\n".join(lines)


def _example_invoke(template: Template) -> str | None:
    events = template.root / "events"
    for logical_id, function in sorted(template.functions().items()):
        found = sorted((events / function.code_dir.name).glob("*.json"))
        if found:
            return f"{logical_id} --event {found[0].relative_to(template.root)}"
    return None
