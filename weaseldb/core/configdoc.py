"""Render docs/configuration.md from the config models, so the reference cannot drift
(tests/unit/test_config.py compares the file with this output)."""

from __future__ import annotations

from pydantic import BaseModel

from weaseldb.core.config import Config

HEADER = """# Configuration reference

Generated from `weaseldb/core/config.py` by
`python -m weaseldb.core.configdoc > docs/configuration.md`.
Pass a TOML or JSON file with `weaseldb up --config FILE`; command-line flags override it.
Unknown keys and out-of-range values are rejected at start with an error naming the field,
for example `persister.max_in_flight_requests: Input should be less than or equal to 1000`.
"""


def _rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows.extend(_rows(annotation, f"{prefix}{name}."))
            continue
        limits = ", ".join(_limit(m) for m in field.metadata)
        description = (field.description or "").replace("\n", " ")
        rows.append(f"| `{prefix}{name}` | `{field.default!r}` | {limits} | {description} |")
    return rows


def _limit(meta: object) -> str:
    for attr, symbol in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if hasattr(meta, attr):
            return f"{symbol} {getattr(meta, attr)}"
    return str(meta)


def render() -> str:
    table = ["| key | default | constraints | meaning |", "|---|---|---|---|", *_rows(Config)]
    return HEADER + "\n" + "\n".join(table) + "\n"


if __name__ == "__main__":
    print(render(), end="")
