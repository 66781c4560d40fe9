"""Cold start: what importing (and setting up) each library adds to a fresh interpreter, and
the size of the Lambda layer we ship.

Imports are timed inside fresh interpreters (`python -I`), after `import boto3`, since the
Lambda runtime has boto3 and any handler using DynamoDB imports it anyway. The libraries
alternate from one interpreter to the next, and the report gives medians.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .report import Budget, Section, Table, kilobytes, milliseconds, ratio

IMPORT_BUDGET_SECONDS = 0.005
LAYER_SOURCE = Path(__file__).resolve().parents[1] / "layer"

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


@dataclass(frozen=True)
class LayerSize:
    zipped: int
    unzipped: int
    parts: dict[str, int]
    """Top-level folder under python/ -> its compressed bytes in the zip."""
    versions: dict[str, str]
    """Distributions pip put in the layer -> version."""
    error: str | None = None


def build_layer(*, install_requirements: bool = True) -> LayerSize:
    """Build the layer as SAM's python builder does for `BuildMethod: python3.x` (the source
    folder copied to python/, its requirements pip-installed beside it, no bytecode), zip it
    and measure the zip."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = root / "python"
        # An editable install leaves an egg-info in layer/; a clean checkout has none.
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        shutil.copytree(LAYER_SOURCE, target, ignore=ignore)
        if install_requirements:
            completed = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-compile",
                    "-r",
                    str(LAYER_SOURCE / "requirements.txt"),
                    "-t",
                    str(target),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if completed.returncode != 0:
                return LayerSize(0, 0, {}, {}, f"pip install exited {completed.returncode}")
        archive = root / "layer.zip"
        parts: dict[str, int] = {}
        unzipped = 0
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted(target.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    bundle.write(path, path.relative_to(root).as_posix())
        with zipfile.ZipFile(archive) as bundle:
            for info in bundle.infolist():
                top = _distribution_name(info.filename.split("/")[1])
                parts[top] = parts.get(top, 0) + info.compress_size
                unzipped += info.file_size
        versions = {}
        for metadata in target.glob("*.dist-info"):
            name, _, version = metadata.name.removesuffix(".dist-info").rpartition("-")
            versions[name] = version
        return LayerSize(archive.stat().st_size, unzipped, parts, versions)


def _distribution_name(top_level: str) -> str:
    """A package folder, a single-module file and a .dist-info folder of one distribution
    all count under the distribution's name."""
    if top_level.endswith(".dist-info"):
        return top_level.removesuffix(".dist-info").rpartition("-")[0]
    return top_level.removesuffix(".py")


def section(imports: ImportTimes, layer: LayerSize) -> Section:
    ours_import = imports.library["import", "ours"]
    theirs_import = imports.library["import", "powertools"]
    ours_setup = imports.library["setup", "ours"]
    theirs_setup = imports.library["setup", "powertools"]
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
            f"Medians of {imports.runs} fresh interpreters per row and library; "
            f"`import boto3` itself took {milliseconds(imports.boto3)} (median)."
        ),
    )
    tables = [imports_table]
    notes = []
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
                    "The layer as SAM builds it (`BuildMethod: python3.11`): `layer/` copied to "
                    "`python/`, `pip install -r layer/requirements.txt -t python/` beside it, "
                    "zipped with deflate. boto3 and botocore are not in it: the runtime has them."
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
    return Section(
        title="Cold start",
        method=(
            "Each row is timed inside a fresh `python -I` interpreter with `time.perf_counter`, "
            "after `import boto3` and a full garbage collection (so that collecting boto3's "
            "objects, about 10 ms, lands in neither library's time); the libraries alternate "
            "from one interpreter to the next."
        ),
        tables=tables,
        budgets=[
            Budget(
                "`import lambda_idempotency` over `import boto3`",
                "≤ 5 ms",
                milliseconds(ours_import),
                ours_import <= IMPORT_BUDGET_SECONDS,
            ),
            Budget(
                "no pydantic at import",
                "not imported",
                "imported" if imports.pydantic.get("ours") else "not imported",
                not imports.pydantic.get("ours"),
            ),
        ],
        notes=notes,
        chart={
            "import": {"ours": ours_import, "powertools": theirs_import},
            "setup": {"ours": ours_setup, "powertools": theirs_setup},
        },
    )
