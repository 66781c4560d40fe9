"""The project's SAM template, where a command reads its functions and tables."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..._base.errors import ConfigurationError
from .exits import CommandError

if TYPE_CHECKING:
    from ..template import FunctionSpec, Template

DEFAULT_TEMPLATE = "template.yaml"


def load_template(args: argparse.Namespace) -> Template:
    from ..template import Template

    try:
        return Template(args.template)
    except ConfigurationError as exc:
        raise CommandError(
            f"{exc}: run from the project's folder, or pass --template PATH"
        ) from exc


def template_function(template: Template, logical_id: str) -> FunctionSpec:
    try:
        return template.function(logical_id)
    except ConfigurationError as exc:
        raise CommandError(f"{exc}; another template: --template PATH") from exc


def template_path(args: argparse.Namespace) -> Path | None:
    """The template, or None where there is none and none was asked for: `local`,
    `create-table` and the operators then work from their own options (CDK, Terraform or
    plain-script projects)."""
    path = Path(args.template)
    if path.is_file() or args.template != DEFAULT_TEMPLATE:
        return path
    return None
