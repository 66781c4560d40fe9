"""Cold start: what importing (and setting up) each library adds to a fresh interpreter, and
the size of the Lambda layer we ship.

Imports are timed inside fresh interpreters (`python -I`), after `import boto3`, since the
Lambda runtime has boto3 and any handler using DynamoDB imports it anyway. The libraries
alternate from one interpreter to the next. Two settings: as installed here (bytecode cached),
and as Lambda loads the layer: built as `sam build` builds it (layer/Makefile, which ships
bytecode for python3.11), first on `sys.path`, read-only, with no bytecode written (Lambda's
/opt is read-only), so a module is compiled at a cold start only if the layer lacks its
bytecode. For reference, our import is timed once more with our package's bytecode removed:
what every cold start paid when the layer shipped only .py files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .report import Budget, Section, Table, kilobytes, milliseconds, ratio

IMPORT_RATIO_BUDGET = 0.5
"""DESIGN.md, Budgets (restated 2026-11-28): the import from the layer, at most 0.5x
Powertools' in the same run."""
ROOT = Path(__file__).resolve().parents[1]
LAYER_SOURCE = ROOT / "layer"
SAM = ROOT / ".tools" / "sam" / "bin" / "sam"
"""The SAM CLI `make sam-check` (and `make bench`) installs; without it, layer/Makefile builds."""
LAYER_RESOURCE = "IdempotencyLayer"
DEV_MODULES = ("_dev", "testing", "__main__")
"""Development tooling (the `_dev` subpackage and its two public doors) that must never be on
the runtime import path (DESIGN.md, Budgets), nor in the layer."""

_LAYER_PROBE = """
import gc, json, os, sys, time
layer = {layer!r}
sys.path.insert(0, layer)
start = time.perf_counter()
import boto3
boto3_done = time.perf_counter()
gc.collect()
library_start, library_cpu_start = time.perf_counter(), time.process_time()
{library}
library_done, library_cpu_done = time.perf_counter(), time.process_time()
origins = {{name: getattr(sys.modules.get(name), "__file__", None) or ""
           for name in ("lambda_idempotency", "aws_lambda_powertools")}}
ours = {{name: module for name, module in sys.modules.items()
        if name.partition(".")[0] == "lambda_idempotency"}}
print(json.dumps({{
    "boto3": boto3_done - start,
    "library": library_done - library_start,
    "library_cpu": library_cpu_done - library_cpu_start,
    "from_layer": [name for name, origin in origins.items() if origin.startswith(layer)],
    "modules": sorted(name for name in ours if name != "lambda_idempotency"),
    "without_bytecode": sorted(
        name for name, module in ours.items()
        if not os.path.isfile(getattr(module.__spec__, "cached", None) or "")),
    "no_bytecode_written": sys.dont_write_bytecode,
}}))
"""
LAYER_PROBES = {
    "ours": "import lambda_idempotency",
    "ours_http": "from lambda_idempotency import idempotent_http",
    "powertools": (
        "from aws_lambda_powertools.utilities.idempotency import "
        "DynamoDBPersistenceLayer, IdempotencyConfig, idempotent"
    ),
}
LAYER_TITLES = {
    "ours": "`import lambda_idempotency`",
    "ours_http": "`from lambda_idempotency import idempotent_http`",
    "powertools": "Powertools: `from aws_lambda_powertools.utilities.idempotency import ...`",
    "ours_without_bytecode": (
        "for reference: `import lambda_idempotency`, its bytecode removed from the layer"
    ),
}
SOURCE_ONLY_PROBE = "ours_without_bytecode"
"""Our import again with our package's __pycache__ removed: the layer as SAM's python3.11 build
method shipped it (only .py files), compiled at every cold start."""

_PROBE = """
import json, sys, time
start = time.perf_counter()
import boto3
boto3_done = time.perf_counter()
client = boto3.client("dynamodb", region_name="us-east-1",
                      aws_access_key_id="a", aws_secret_access_key="b") if {with_client} else None
# A full collection of boto3's objects (about 10 ms) would otherwise land in whichever
# library's import crosses the collector's threshold: start both from the same state.
import gc; gc.collect()
library_start = time.perf_counter()
{library}
library_done = time.perf_counter()
print(json.dumps({{"boto3": boto3_done - start, "library": library_done - library_start,
                  "pydantic": "pydantic" in sys.modules}}))
"""

_OURS_IMPORT = "import lambda_idempotency"
_OURS_SETUP = """
from lambda_idempotency import DynamoDBStore, idempotent
@idempotent(key="order_id", payload="@", store=DynamoDBStore("idempotency", client=client))
def handler(event, context):
    return {"ok": True}
"""
_POWERTOOLS_IMPORT = (
    "from aws_lambda_powertools.utilities.idempotency import "
    "DynamoDBPersistenceLayer, IdempotencyConfig, idempotent"
)
_POWERTOOLS_SETUP = """
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer, IdempotencyConfig, idempotent)
config = IdempotencyConfig(event_key_jmespath="order_id", payload_validation_jmespath="@")
layer = DynamoDBPersistenceLayer(table_name="idempotency", boto3_client=client)
@idempotent(config=config, persistence_store=layer)
def handler(event, context):
    return {"ok": True}
"""

PROBES = {
    ("import", "ours"): (_OURS_IMPORT, False),
    ("import", "powertools"): (_POWERTOOLS_IMPORT, False),
    ("setup", "ours"): (_OURS_SETUP, True),
    ("setup", "powertools"): (_POWERTOOLS_SETUP, True),
}


def _probe(library: str, with_client: bool) -> dict[str, float | bool]:
    code = _PROBE.format(library=library, with_client=with_client)
    completed = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    )
    result: dict[str, float | bool] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


@dataclass(frozen=True)
class ImportTimes:
    library: dict[tuple[str, str], float]
    """(probe, contender slug) -> median seconds the library's lines took."""
    boto3: float
    """Median seconds for `import boto3` itself."""
    pydantic: dict[str, bool]
    """Whether importing the library imported pydantic."""
    runs: int


def measure_imports(runs: int) -> ImportTimes:
    probes = list(PROBES)
    for probe in probes:  # writes the bytecode caches; not measured
        _probe(*PROBES[probe])
    samples: dict[tuple[str, str], list[float]] = {probe: [] for probe in probes}
    boto3: list[float] = []
    pydantic: dict[str, bool] = {}
    for run in range(runs):
        order = probes if run % 2 == 0 else probes[::-1]
        for probe in order:
            result = _probe(*PROBES[probe])
            samples[probe].append(float(result["library"]))
            boto3.append(float(result["boto3"]))
            if probe[0] == "import":
                pydantic[probe[1]] = pydantic.get(probe[1], False) or bool(result["pydantic"])
    return ImportTimes(
        library={probe: statistics.median(values) for probe, values in samples.items()},
        boto3=statistics.median(boto3),
        pydantic=pydantic,
        runs=runs,
    )


_SELF_CHECK_PROBE = """
import json, time
import boto3
from lambda_idempotency._stores.dynamodb.client import default_client
import lambda_idempotency._stores.dynamodb.wire.check as check
from lambda_idempotency._stores.dynamodb.wire.path import FastWire

def first_use():
    client = default_client(None, "us-east-1")
    start = time.process_time()
    wire = FastWire(client)
    built = time.process_time()
    verified = check.verified(wire)
    return client, built - start, time.process_time() - built, verified

client, build, check_first, verified = first_use()
_, _, check_again, verified_again = first_use()
client.meta.events.register("before-send.dynamodb", check._Twin(FastWire(client))._answer)
client.get_item(TableName="t", Key={"pk": {"S": "k"}})
call = time.process_time()
for _ in range(20):
    client.get_item(TableName="t", Key={"pk": {"S": "k"}})
print(json.dumps({"build": build, "check": check_first, "check_again": check_again,
                  "verified": verified and verified_again,
                  "boto3_call": (time.process_time() - call) / 20}))
"""


@dataclass(frozen=True)
class SelfCheckTimes:
    """The fast wire path's first use of a client, in fresh interpreters (medians)."""

    build: float
    """Seconds to build the lean path over the process's first client."""
    check: float
    """Seconds for its self-check (`_stores.dynamodb.wire.check`), the process's first:
    botocore's and our lazily built parts (model shapes, exception classes, compiled decoders)
    built on the way, as the first calls would build them."""
    check_again: float
    """Seconds for the self-check of a second client in the same process."""
    boto3_call: float
    """Seconds for a GetItem through boto3 once warm (answered in before-send), for scale."""
    verified: bool
    runs: int


def measure_self_check(runs: int) -> SelfCheckTimes:
    """The self-check runs on first use, per client, never at import: timed apart."""
    samples: list[dict[str, Any]] = []
    for _ in range(runs):
        completed = subprocess.run(
            [sys.executable, "-I", "-c", _SELF_CHECK_PROBE],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"},
        )
        samples.append(json.loads(completed.stdout.strip().splitlines()[-1]))
    return SelfCheckTimes(
        build=statistics.median(sample["build"] for sample in samples),
        check=statistics.median(sample["check"] for sample in samples),
        check_again=statistics.median(sample["check_again"] for sample in samples),
        boto3_call=statistics.median(sample["boto3_call"] for sample in samples),
        verified=all(sample["verified"] for sample in samples),
        runs=runs,
    )


@dataclass(frozen=True)
class LayerImports:
    """Imports from the built layer, as shipped, none written: seconds per fresh interpreter."""

    samples: dict[str, list[float]]
    """probe -> seconds over `import boto3`, one per interpreter."""
    cpu: dict[str, list[float]]
    """probe -> CPU seconds (user + system) of the same imports: steadier on a shared machine."""
    boto3: float
    from_layer: dict[str, list[str]]
    """probe -> which of the two packages were loaded from the layer."""
    modules: list[str]
    """Our submodules loaded by the HTTP-decorator import."""
    without_bytecode: list[str]
    """Our modules imported from the layer as shipped that had no bytecode in it (must be none)."""
    bytecode_files: int
    """.pyc files in the layer as built."""
    unchecked_bytecode_files: int
    """Of which hash-based and unchecked (PEP 552): valid whatever the sources' timestamps."""
    bytecode_written: int
    """.pyc files that appeared in the layer during the runs (must be 0: /opt is read-only)."""
    method: str
    """How the layer was built."""


@dataclass(frozen=True)
class LayerSize:
    zipped: int
    unzipped: int
    parts: dict[str, int]
    """Top-level folder under python/ -> its compressed bytes in the zip."""
    versions: dict[str, str]
    """Distributions pip put in the layer -> version."""
    error: str | None = None


@contextlib.contextmanager
def built_layer(*, install_requirements: bool = True) -> Iterator[tuple[Path, str]]:
    """The layer's `python/` folder as `sam build` makes it, in a temporary folder, and how it
    was made. With the SAM CLI installed, `sam build` itself builds the template's layer
    resource; otherwise `make build-IdempotencyLayer` from layer/Makefile, the target `sam build`
    runs (`BuildMethod: makefile`), without the copy SAM makes first; without requirements when
    asked (the smoke test: no registry needed)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if install_requirements and SAM.exists():
            completed = subprocess.run(
                [
                    str(SAM),
                    "build",
                    LAYER_RESOURCE,
                    "--template",
                    str(ROOT / "template.yaml"),
                    "--build-dir",
                    str(root / "build"),
                ],
                capture_output=True,
                text=True,
                check=False,
                cwd=ROOT,
                env={**os.environ, "SAM_CLI_TELEMETRY": "0"},
            )
            if completed.returncode != 0:
                raise RuntimeError(f"sam build exited {completed.returncode}")
            yield root / "build" / LAYER_RESOURCE / "python", "`sam build` itself (SAM CLI)"
            return
        requirements = "requirements.txt" if install_requirements else ""
        subprocess.run(
            [
                "make",
                "--no-print-directory",
                "-C",
                str(LAYER_SOURCE),
                f"build-{LAYER_RESOURCE}",
                f"ARTIFACTS_DIR={root}",
                f"PYTHON={sys.executable}",
                f"REQUIREMENTS={requirements}",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        method = f"`make build-{LAYER_RESOURCE}` (layer/Makefile, the target `sam build` runs)"
        if not install_requirements:
            method += " without its requirements"
        yield root / "python", method


def _bytecode_files(folder: Path) -> set[Path]:
    return set(folder.rglob("*.pyc"))


def _unchecked_hash(pyc: Path) -> bool:
    with pyc.open("rb") as header:
        return int.from_bytes(header.read(8)[4:8], "little") == 0b01


@contextlib.contextmanager
def _read_only(layer: Path) -> Iterator[None]:
    """Every folder of the layer read-only while the probes run, as /opt is (root ignores the
    mode: `-B` and PYTHONDONTWRITEBYTECODE are what guarantee nothing is written)."""
    folders = [layer, *(path for path in layer.rglob("*") if path.is_dir())]
    for folder in folders:
        folder.chmod(0o555)
    try:
        yield
    finally:
        for folder in folders:
            folder.chmod(0o755)


def _probe_layer(layer: Path, library: str) -> dict[str, Any]:
    code = _LAYER_PROBE.format(layer=str(layer), library=library)
    completed = subprocess.run(
        [sys.executable, "-I", "-B", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    if not result["no_bytecode_written"]:
        raise RuntimeError("the probe interpreter would write bytecode")
    return result


def measure_layer_imports(layer: Path, method: str, runs: int) -> LayerImports:
    """Each probe in `runs` fresh interpreters, probes alternating, with the layer as built
    first on `sys.path`, read-only, no bytecode written (`-B`, PYTHONDONTWRITEBYTECODE). Then
    our import again, `runs` times, with our package's bytecode removed (the reference row)."""
    shipped = _bytecode_files(layer)
    unchecked = sum(1 for pyc in shipped if _unchecked_hash(pyc))
    samples: dict[str, list[float]] = {probe: [] for probe in LAYER_PROBES}
    cpu: dict[str, list[float]] = {probe: [] for probe in LAYER_PROBES}
    boto3: list[float] = []
    from_layer: dict[str, list[str]] = {}
    modules: list[str] = []
    without_bytecode: set[str] = set()

    def record(probe: str, result: dict[str, Any]) -> None:
        samples.setdefault(probe, []).append(float(result["library"]))
        cpu.setdefault(probe, []).append(float(result["library_cpu"]))
        boto3.append(float(result["boto3"]))

    with _read_only(layer):
        for run in range(runs):
            probes = list(LAYER_PROBES) if run % 2 == 0 else list(LAYER_PROBES)[::-1]
            for probe in probes:
                result = _probe_layer(layer, LAYER_PROBES[probe])
                record(probe, result)
                from_layer[probe] = result["from_layer"]
                if probe != "powertools":
                    without_bytecode.update(result["without_bytecode"])
                if probe == "ours_http":
                    modules = result["modules"]
    written = len(_bytecode_files(layer) - shipped)
    for cache in list((layer / "lambda_idempotency").rglob("__pycache__")):  # every folder's
        shutil.rmtree(cache, ignore_errors=True)
    with _read_only(layer):
        for _ in range(runs):
            record(SOURCE_ONLY_PROBE, _probe_layer(layer, LAYER_PROBES["ours"]))
    return LayerImports(
        samples=samples,
        cpu=cpu,
        boto3=statistics.median(boto3),
        from_layer=from_layer,
        modules=modules,
        without_bytecode=sorted(without_bytecode),
        bytecode_files=len(shipped),
        unchecked_bytecode_files=unchecked,
        bytecode_written=written,
        method=method,
    )


def layer_size(target: Path) -> LayerSize:
    """Zip the layer's python/ folder as SAM deploys it, bytecode included, and measure the
    zip."""
    root = target.parent
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "layer.zip"
        parts: dict[str, int] = {}
        unzipped = 0
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted(target.rglob("*")):
                if path.is_file():
                    bundle.write(path, path.relative_to(root).as_posix())
        with zipfile.ZipFile(archive) as bundle:
            for info in bundle.infolist():
                top = _distribution_name(*info.filename.split("/")[1:3])
                parts[top] = parts.get(top, 0) + info.compress_size
                unzipped += info.file_size
        zipped = archive.stat().st_size
    versions = {}
    for metadata in target.glob("*.dist-info"):
        name, _, version = metadata.name.removesuffix(".dist-info").rpartition("-")
        versions[name] = version
    return LayerSize(zipped, unzipped, parts, versions)


def add_powertools_layer(target: Path) -> None:
    """Powertools as a function using both has it: its own layer beside ours. Lambda extracts
    every layer of a function into /opt, so its `python/` and ours are one folder: the version
    installed here, with what it requires, compiled as ours is (our layer carries no Powertools:
    it is the `powertools` extra)."""
    from importlib import metadata

    version = metadata.version("aws-lambda-powertools")
    install = ["install", "--quiet", "--disable-pip-version-check", "--no-compile"]
    compile_all = ["-q", "-j", "0", "--invalidation-mode", "unchecked-hash", "-s", str(target)]
    for command in (
        ["pip", *install, "--target", str(target), f"aws-lambda-powertools=={version}"],
        ["compileall", *compile_all, "-p", "/opt/python", str(target)],
    ):
        subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True, check=True)


def measure_layer(
    *, runs: int, install_requirements: bool = True
) -> tuple[LayerImports, LayerSize]:
    with built_layer(install_requirements=install_requirements) as (target, built_by):
        size = layer_size(target)  # first: the reference row removes our bytecode
        method = built_by
        if install_requirements:  # Powertools' probe: from its own layer, not the venv
            add_powertools_layer(target)
            method += ", with Powertools' own layer beside it in /opt/python"
        return measure_layer_imports(target, method, runs), size


def _distribution_name(top_level: str, inside: str = "") -> str:
    """A package folder, a single-module file (and its bytecode in the top-level __pycache__)
    and a .dist-info folder of one distribution all count under the distribution's name."""
    if top_level == "__pycache__":
        return inside.partition(".")[0]
    if top_level.endswith(".dist-info"):
        return top_level.removesuffix(".dist-info").rpartition("-")[0]
    return top_level.removesuffix(".py")


def _spread(values: list[float]) -> str:
    return (
        f"{milliseconds(min(values))} / {milliseconds(statistics.median(values))} / "
        f"{milliseconds(max(values))}"
    )


def section(
    imports: ImportTimes,
    built: LayerImports,
    layer: LayerSize,
    self_check: SelfCheckTimes | None = None,
) -> Section:
    ours_import = imports.library["import", "ours"]
    theirs_import = imports.library["import", "powertools"]
    ours_setup = imports.library["setup", "ours"]
    theirs_setup = imports.library["setup", "powertools"]
    layer_ours = statistics.median(built.samples["ours"])
    layer_theirs = statistics.median(built.samples["powertools"])
    runs = len(built.samples["ours"])
    layer_table = Table(
        [
            "import, over `import boto3`",
            "min / median / max",
            "median CPU",
            "median vs Powertools",
        ],
        [
            [
                LAYER_TITLES[probe],
                _spread(values),
                milliseconds(statistics.median(built.cpu[probe])),
                ratio(statistics.median(values), layer_theirs),
            ]
            for probe, values in built.samples.items()
        ],
        caption=(
            f"**As Lambda loads the layer**: built by {built.method}, with the bytecode it "
            f"ships ({built.bytecode_files} .pyc files, {built.unchecked_bytecode_files} of "
            "them hash-based and unchecked); the built `python/` folder first on `sys.path`, "
            "read-only, every interpreter started with `-B` and `PYTHONDONTWRITEBYTECODE=1` "
            f"(bytecode written during the runs: {built.bytecode_written} files; our modules "
            "imported without bytecode in the layer: "
            f"{', '.join(built.without_bytecode) or 'none'}). {runs} fresh interpreters per "
            "row; `import boto3` (from the environment, compiled, as the runtime's is) took "
            f"{milliseconds(built.boto3)} (median). The last row removes our package's "
            "bytecode first: what each cold start paid when SAM's python3.11 build method "
            "shipped only .py files. CPU is the interpreter's user and system time for the "
            "same lines, steadier than wall time on a shared machine."
        ),
    )
    imports_table = Table(
        ["what", "lambda-idempotency", "Powertools idempotency", "ratio"],
        [
            [
                "import, over `import boto3`",
                milliseconds(ours_import),
                milliseconds(theirs_import),
                ratio(ours_import, theirs_import),
            ],
            [
                "import + store + decorate a handler (client already made)",
                milliseconds(ours_setup),
                milliseconds(theirs_setup),
                ratio(ours_setup, theirs_setup),
            ],
            [
                "pydantic imported",
                "yes" if imports.pydantic.get("ours") else "no",
                "yes" if imports.pydantic.get("powertools") else "no",
                "",
            ],
        ],
        caption=(
            "As installed in this environment, **with bytecode cached** (not what Lambda "
            f"does with a SAM-built layer): medians of {imports.runs} fresh interpreters per row "
            f"and library; `import boto3` itself took {milliseconds(imports.boto3)} (median)."
        ),
    )
    tables = [layer_table, imports_table]
    if self_check is not None:
        tables.append(
            Table(
                ["first use of a client (once per client, not at import)", "median"],
                [
                    ["the fast wire path built over it", milliseconds(self_check.build)],
                    [
                        "its self-check, the process's first (lazy parts built on the way)",
                        milliseconds(self_check.check),
                    ],
                    ["the self-check of a second client", milliseconds(self_check.check_again)],
                    [
                        "for scale: a GetItem through boto3 on a warm client",
                        milliseconds(self_check.boto3_call),
                    ],
                ],
                caption=(
                    f"The fast wire path's first use of our default client, in {self_check.runs} "
                    "fresh interpreters, CPU time (answers from memory, no HTTP): it is built, "
                    "then proves itself against botocore's own way (docs/operations.md) before it "
                    "serves the client; "
                    + (
                        "it agreed in every run."
                        if self_check.verified
                        else "**it found a difference: the client makes every call.**"
                    )
                ),
            )
        )
    notes = []
    missing = [
        f"{probe} loaded {', '.join(found) or 'nothing'} from the layer"
        for probe, found in built.from_layer.items()
        if ("aws_lambda_powertools" if probe == "powertools" else "lambda_idempotency") not in found
    ]
    if missing:
        notes.append(
            "Not every package came from the built layer (the emulated build in a smoke run "
            "installs no requirements): " + "; ".join(missing) + "."
        )
    if layer.error is None:
        rows = [
            ["whole layer, zipped", kilobytes(layer.zipped)],
            ["whole layer, unzipped", kilobytes(layer.unzipped)],
        ]
        for name, size in sorted(layer.parts.items(), key=lambda part: -part[1]):
            version = layer.versions.get(name, "")
            label = f"`{name}` {version}".rstrip() if name != "requirements.txt" else name
            rows.append([f"of which {label}, zipped", kilobytes(size)])
        tables.append(
            Table(
                ["layer", "size"],
                rows,
                caption=(
                    f"Our layer as built ({built.method.partition(', with')[0]}), zipped "
                    "with deflate, bytecode included (every module compiled: about as many "
                    "bytes again as the sources). It is the package alone: boto3 and botocore "
                    "are the runtime's, Powertools is the `powertools` extra (its own layer "
                    "for the probes above)."
                ),
            )
        )
        if "aws_lambda_powertools" in layer.parts:
            notes.append(
                "The layer carries aws-lambda-powertools as a dependency (for the `powertools_*` "
                "JMESPath functions and the batch processors); our own package is the "
                "`lambda_idempotency` line."
            )
    else:
        notes.append(f"The layer could not be built in this run: {layer.error}.")
    dev = [name for name in built.modules if name.split(".")[1] in DEV_MODULES]
    return Section(
        title="Cold start",
        method=(
            "Each row is timed inside a fresh `python -I` interpreter (`-I -B` for the layer) "
            "with `time.perf_counter`, "
            "after `import boto3` and a full garbage collection (so that collecting boto3's "
            "objects, about 10 ms, lands in neither library's time); the libraries alternate "
            "from one interpreter to the next."
        ),
        tables=tables,
        budgets=[
            Budget(
                "`import lambda_idempotency` from the SAM-built layer as shipped, read-only, "
                "no bytecode written, over `import boto3`",
                "≤ 0.5x Powertools' (medians, the same run)",
                f"{milliseconds(layer_ours)} vs {milliseconds(layer_theirs)} = "
                f"{ratio(layer_ours, layer_theirs)}",
                layer_ours <= IMPORT_RATIO_BUDGET * layer_theirs
                and built.bytecode_written == 0
                and not built.without_bytecode,
            ),
            Budget(
                "no pydantic at import",
                "not imported",
                "imported" if imports.pydantic.get("ours") else "not imported",
                not imports.pydantic.get("ours"),
            ),
            Budget(
                "no development tooling on the runtime import path",
                f"none of {', '.join(DEV_MODULES)} imported by `idempotent_http`'s import",
                ", ".join(dev) or "none imported",
                not dev,
            ),
        ],
        notes=notes,
        chart={
            "layer": {
                probe: [min(values), statistics.median(values), max(values)]
                for probe, values in built.samples.items()
            },
            "import": {"ours": ours_import, "powertools": theirs_import},
            "setup": {"ours": ours_setup, "powertools": theirs_setup},
        },
    )
