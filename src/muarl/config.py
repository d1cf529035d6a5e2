"""What every command's configuration shares: a pydantic model loadable from YAML, flags on top, and one
error type whose message says what to change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from typing_extensions import Self

from muarl.errors import InputError


class ConfigError(InputError):
    """A configuration that cannot work; the message says what to change."""


def validation_problems(exc: ValidationError, root: str | None = "config") -> str:
    """A pydantic error as one line: each problem as ``field.path: message`` (``root: message`` for the whole
    model's, or the bare message when ``root`` is None), joined by "; "."""
    def one(e: Any) -> str:
        where = ".".join(map(str, e["loc"])) or root
        message = e["msg"].removeprefix("Value error, ")
        return f"{where}: {message}" if where else message
    return "; ".join(one(e) for e in exc.errors())


class YamlConfig(BaseModel):
    """Base of the per-command configs: unknown keys are errors, every field has a default and a description."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: Any) -> Self:
        """From a YAML file (optional) with ``overrides`` (None values ignored) on top."""
        data: dict[str, Any] = {}
        if path is not None:
            try:
                data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise ConfigError(f"cannot read config {path}: {exc}") from None
            if not isinstance(data, dict):
                raise ConfigError(f"config {path} must be a mapping of field: value")
        data.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**data)
        except ValidationError as exc:
            raise ConfigError(f"invalid {cls.__name__}: {validation_problems(exc)}") from None

    def dump_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
