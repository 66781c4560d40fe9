"""Every Python example in README.md and docs/*.md runs, as written, against the template's
tables (in moto): an example copied into a function must work there.

Each example runs alone, as a module of its own, unless its first line is the marker
`# continues the example above`: then it starts with the names the example before it on the
same page defined. Examples that define `test_` functions run under pytest with the installed
plugin. Beyond running, the tests below call the handlers the examples define, with the
events the pages describe, and check what a caller would see.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore
from lambda_idempotency._dev.template import Template
from lambda_idempotency._stores.dynamodb.calls import RUNTIME_IAM_ACTIONS
from lambda_idempotency.testing import IdempotencyTable
from tests.batch_events import batch, sqs_record
from tests.conftest import FakeContext
from tests.http_events import http_event, jwt
from tests.unit.test_metrics import counts, emf_lines

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "reference").glob("*.md")),
    *sorted((ROOT / "docs" / "contributing").glob("*.md")),
]
CONTINUES = "# continues the example above"
OWN_TESTS = {"operations.md": "test_the_operations_guide_examples_write_what_it_shows"}
"""Pages whose examples change process-wide logging: run by a test that undoes it."""


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def is_pytest(self) -> bool:
        return re.search(r"^def test_", self.code, re.MULTILINE) is not None


def python_examples(page: Path) -> list[Example]:
    text = page.read_text(encoding="utf-8")
    return [
        Example(page, text.count("\n", 0, match.start()) + 2, match.group(1))
        for match in re.finditer(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    ]


def python_blocks(markdown: Path) -> list[str]:
    return [example.code for example in python_examples(markdown)]


def run_examples(page: Path) -> list[dict[str, Any]]:
    """Runs the page's examples (not its pytest ones) in order; their namespaces."""
    namespaces: list[dict[str, Any]] = []
    for example in python_examples(page):
        if example.is_pytest:
            continue
        module = types.ModuleType(f"docs_example_{example.page.stem}_{example.line}")
        sys.modules[module.__name__] = module  # dataclasses look their module up
        namespace = vars(module)
        if example.code.startswith(CONTINUES):
            assert namespaces, f"{example}: continues, but no example comes before it"
            namespace.update({k: v for k, v in namespaces[-1].items() if not k.startswith("__")})
        try:
            exec(compile(example.code, str(example), "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"the example at {example} fails: {error!r}") from error
        namespaces.append(namespace)
    return namespaces


@pytest.fixture(autouse=True)
def _forget_example_modules() -> Iterator[None]:
    yield
    for name in [name for name in sys.modules if name.startswith("docs_example_")]:
        del sys.modules[name]


@pytest.fixture(autouse=True)
def _event_loop_for_the_examples() -> Iterator[None]:
    """An example may take the thread's event loop (Mangum does when it is built): it gets
    one of its own, closed after the test, so no later test meets it left open."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    asyncio.set_event_loop(None)
    loop.close()


@pytest.fixture
def template_tables() -> Iterator[IdempotencyTable]:
    """The template's tables in moto, under their local names, and the environment its
    functions get (IDEMPOTENCY_TABLE, CHARGES_TABLE, ...)."""
    template = Template(ROOT / "template.yaml")
    with IdempotencyTable(root=ROOT) as tables:
        for spec in template.tables():
            tables.client.create_table(
                TableName=spec.name,
                KeySchema=spec.key_schema,
                AttributeDefinitions=spec.attribute_definitions,
                BillingMode="PAY_PER_REQUEST",
            )
        for function in template.functions().values():
            tables.setenv(**function.environment)
        yield tables


def items(tables: IdempotencyTable, name: str) -> list[dict[str, Any]]:
    return list(tables.client.scan(TableName=name)["Items"])


@pytest.mark.parametrize(
    "page",
    [
        page
        for page in PAGES
        if any(not example.is_pytest for example in python_examples(page))
        and page.name not in OWN_TESTS
    ],
    ids=lambda page: page.name,
)
def test_every_example_of_the_page_runs(page: Path, template_tables: IdempotencyTable) -> None:
    assert run_examples(page)


def test_every_page_with_examples_is_run() -> None:
    """A page is run by the test above, by a test of its own, or holds only pytest tests."""
    own = {name for name in OWN_TESTS if OWN_TESTS[name] in globals()}
    assert own == set(OWN_TESTS)
    markers = [
        str(example)
        for page in PAGES
        for example in python_examples(page)
        if CONTINUES in example.code and not example.code.startswith(CONTINUES)
    ]
    assert markers == [], "the marker must be an example's first line"


def test_the_readme_example_replays(template_tables: IdempotencyTable) -> None:
    (direct,) = run_examples(ROOT / "README.md")

    assert direct["handler"]({"order_id": "o-1"}, FakeContext()) is None
    assert direct["handler"]({"order_id": "o-1"}, FakeContext()) is None
    assert len(items(template_tables, "IdempotencyTable")) == 1


def defining(namespaces: list[dict[str, Any]], *names: str) -> dict[str, Any]:
    """The one example of a page that defines all of `names`."""
    (found,) = [space for space in namespaces if all(name in space for name in names)]
    return found


def test_the_guide_examples_do_what_the_guide_says(template_tables: IdempotencyTable) -> None:
    examples = run_examples(ROOT / "docs" / "guide.md")
    first = examples[0]  # "A first handler", the guide's first example
    decorators = defining(examples, "ship", "Order", "Receipt")
    on_replay = defining(examples, "mark", "handler")
    transaction = defining(examples, "CHARGES_TABLE", "handler")
    async_code = defining(examples, "charge", "main")

    charged = {"order_id": "o-0", "status": "charged"}
    assert first["handler"]({"order_id": "o-0"}, FakeContext()) == charged
    assert first["handler"]({"order_id": "o-0"}, FakeContext()) == charged
    assert first["handler"].idempotency.stats["executed"] == 1

    receipt = decorators["ship"](decorators["Order"]("o-1"))
    assert decorators["ship"](decorators["Order"]("o-1")) == receipt
    assert type(receipt) is decorators["Receipt"]
    on_replay["handler"]({"order_id": "o-2"}, FakeContext())
    assert on_replay["handler"]({"order_id": "o-2"}, FakeContext()) == {
        "order_id": "o-2",
        "replayed": True,
    }
    order = {"order_id": "o-3", "amount_cents": 1250}
    assert transaction["handler"](order, FakeContext()) == {"status": "charged"}
    assert transaction["handler"](order, FakeContext()) == {"status": "charged"}
    assert items(template_tables, "ChargesTable") == [
        {"charge_id": {"S": "ch_o-3"}, "amount_cents": {"N": "1250"}}
    ]
    assert inspect.iscoroutinefunction(async_code["charge"])
    first, again = asyncio.run(async_code["main"]())
    assert first == again == {"charged": "o-1", "amount": 5}


def test_the_http_example_creates_once_and_replays(template_tables: IdempotencyTable) -> None:
    create = run_examples(ROOT / "docs" / "http.md")[0]
    request = http_event(
        "http-api", headers={"Idempotency-Key": '"k-1"'}, body="{}", authorizer=jwt("user-1")
    )

    first = create["create_payment"](request, FakeContext())
    again = create["create_payment"](request, FakeContext())

    assert first["statusCode"] == again["statusCode"] == 201
    assert json.loads(again["body"]) == {"id": "pay_123", "status": "created"}
    assert again["headers"]["Idempotent-Replayed"] == "true"


def test_the_http_pages_own_event_creates_once_replays_and_is_inspected_by_its_file(
    template_tables: IdempotencyTable, tmp_path: Path, capsys: Any
) -> None:
    """The request http.md gives a user without API Gateway (its JSON block, saved as they
    would save it) is one the front end reads, and `inspect --http --event` finds its record."""
    from lambda_idempotency._dev import cli

    page = (ROOT / "docs" / "http.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```json\n(.*?)^```", page, re.DOTALL | re.MULTILINE)
    block = next(block for block in blocks if '"version": "2.0"' in block)
    saved = tmp_path / "event.json"
    saved.write_text(block, encoding="utf-8")
    create = run_examples(ROOT / "docs" / "http.md")[0]

    first = create["create_payment"](json.loads(saved.read_text()), FakeContext())
    again = create["create_payment"](json.loads(saved.read_text()), FakeContext())

    assert first["statusCode"] == again["statusCode"] == 201
    assert again["headers"]["Idempotent-Replayed"] == "true"
    namespace = f"{create['__name__']}.create_payment"
    status = cli.main(["inspect", "--http", "--event", str(saved), "--namespace", namespace])
    out = capsys.readouterr().out
    assert status == 0 and "COMPLETED" in out


def test_each_recipe_module_is_a_code_block_of_a_page_as_is() -> None:
    """tests/recipes/ holds the recipes the tests import (the FastAPI app of http.md): what
    a reader copies from the page is what the tests ran."""
    blocks = {example.code for page in PAGES for example in python_examples(page)}
    recipes = sorted((ROOT / "tests" / "recipes").glob("[!_]*.py"))

    assert {recipe.name for recipe in recipes} >= {"fastapi_app.py", "fastapi_payments.py"}
    for recipe in recipes:
        assert recipe.read_text(encoding="utf-8") in blocks, f"no page shows {recipe.name} as is"


def test_the_batch_example_ships_an_order_once(template_tables: IdempotencyTable) -> None:
    (ship,) = run_examples(ROOT / "docs" / "batch.md")
    event = batch(sqs_record("m-1", {"order_id": "o-1"}), sqs_record("m-2", {"order_id": "o-1"}))

    assert ship["lambda_handler"](event, FakeContext()) == {"batchItemFailures": []}
    assert len(items(template_tables, "IdempotencyTable")) == 1


@pytest.mark.timeout_scale(3)  # a pytest subprocess per example: 41 s beside a loaded run
def test_the_pytest_examples_pass_with_the_installed_plugin(tmp_path: Path) -> None:
    """Run from the project's root, so `import_handler` finds functions/ as a user's tests
    find their own handlers."""
    examples = [example for page in PAGES for example in python_examples(page) if example.is_pytest]
    tests = sum(len(re.findall(r"^def test_", example.code, re.MULTILINE)) for example in examples)
    assert {example.page.name for example in examples} >= {"testing.md", "guide.md"}
    test_file = tmp_path / "test_examples.py"
    test_file.write_text("\n\n".join(example.code for example in examples), encoding="utf-8")

    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )

    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert f"{tests} passed" in completed.stdout


def test_the_operations_guide_examples_write_what_it_shows(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The metrics examples print the EMF lines the guide describes; the Logger set-up runs."""
    blocks = python_blocks(ROOT / "docs" / "operations.md")
    assert len(blocks) == 2
    monkeypatch.setenv("IDEMPOTENCY_TABLE", moto_store.table_name)
    namespace: dict[str, Any] = {}
    ours = logging.getLogger("lambda_idempotency")
    saved = ours.handlers[:], ours.level, ours.propagate
    try:
        exec(blocks[0], namespace)
        namespace["charge"]({"order_id": "order-1", "amount": 3}, FakeContext())
        namespace["refund"]({"refund_id": "order-1", "amount": 3}, FakeContext())
        namespace["ship"]({"order_id": "order-1"}, FakeContext())
        exec(blocks[1], namespace)  # the Logger set-up
    finally:
        namespace["metrics"].clear_metrics()
        ours.handlers, ours.propagate = saved[0], saved[2]
        ours.setLevel(saved[1])
        powertools_logger = logging.getLogger("checkout")  # bound to this test's stdout
        powertools_logger.handlers.clear()
        vars(powertools_logger).pop("init", None)

    documents = emf_lines(capsys.readouterr().out)
    namespaces = [d["_aws"]["CloudWatchMetrics"][0]["Namespace"] for d in documents]
    assert namespaces == ["LambdaIdempotency", "Payments", "Orders"]
    assert counts(documents) == {"executed": 3, "OrderShipped": 1}


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings (code blocks left out)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def test_every_link_between_the_pages_finds_its_page_and_heading() -> None:
    """Pages moved into reference/ and sections between pages: no link is left dangling."""
    broken = []
    for page in PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and (linked.is_dir() or anchor not in anchors(linked)):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


INFRA = ROOT / "docs" / "infra"


@pytest.mark.parametrize("snippet", ["sam.yaml", "cdk_app.py", "main.tf"])
def test_the_guide_shows_each_infrastructure_snippet_as_checked(snippet: str) -> None:
    """`make infra-check` runs the files in docs/infra/ through their tools: the guide shows
    them byte for byte, under a comment naming the file."""
    guide = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    shown = re.search(
        rf"^<!-- docs/infra/{re.escape(snippet)} -->\n```\w+\n(.*?)^```", guide, re.S | re.M
    )
    assert shown is not None, f"the guide does not show docs/infra/{snippet}"
    assert shown.group(1) == (INFRA / snippet).read_text(encoding="utf-8")


@pytest.mark.parametrize("snippet", ["sam.yaml", "cdk_app.py", "main.tf"])
def test_each_snippet_grants_what_the_library_calls(snippet: str) -> None:
    """The policy in each snippet is the one template.yaml is checked against, no more."""
    granted = set(re.findall(r"dynamodb:\w+", (INFRA / snippet).read_text(encoding="utf-8")))
    assert granted == RUNTIME_IAM_ACTIONS


def test_the_snippets_runtimes_are_the_layers() -> None:
    """A reader who puts the project's layer on the snippets' function gets its bytecode:
    the layer is built for the runtimes template.yaml lists (it said python3.12, the layer
    3.11)."""
    layer = re.search(r"CompatibleRuntimes: \[(.*)\]", (ROOT / "template.yaml").read_text())
    assert layer is not None
    runtimes = {name.strip() for name in layer.group(1).split(",")}
    sam = re.findall(r"Runtime: (python3\.\d+)", (INFRA / "sam.yaml").read_text())
    cdk = re.findall(r"Runtime\.PYTHON_3_(\d+)", (INFRA / "cdk_app.py").read_text())
    assert sam and set(sam) <= runtimes
    assert cdk and {f"python3.{minor}" for minor in cdk} <= runtimes


def test_the_terraform_snippet_bounds_its_provider_to_the_major_version_checked() -> None:
    """`>= 5.0` took 6.x, which nothing here has checked."""
    (constraint,) = re.findall(r'version\s*=\s*"([^"]+)"', (INFRA / "main.tf").read_text())
    assert re.fullmatch(r"~> 5\.\d+", constraint), constraint


def test_the_cdk_app_ships_with_what_cdk_synth_needs_and_the_guide_says_so() -> None:
    """`cdk synth` reads cdk.json for the app, and the app bundles build/order_function."""
    assert json.loads((INFRA / "cdk.json").read_text()) == {"app": "python3 cdk_app.py"}
    assert 'code=lambda_.Code.from_asset("build/order_function")' in (
        INFRA / "cdk_app.py"
    ).read_text(encoding="utf-8")
    guide = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    summary = guide[guide.index("<b>CDK (Python)</b>") :].split("</summary>", 1)[0]
    assert "docs/infra/cdk.json" in summary and "build/order_function/" in summary
