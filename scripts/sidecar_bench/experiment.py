"""The experiment as config.yaml describes it, validated, with the preset resolved."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from .conditions import Condition, ConfigError, LoadSettings, expand_matrix

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


@dataclass(frozen=True)
class Host:
    name: str
    url: str | None = None
    tls: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Experiment:
    preset: str
    conditions: tuple[Condition, ...]
    load: LoadSettings
    image: Mapping[str, str]
    hosts: tuple[Host, ...]
    # Repetitions of every condition: the preset's, or the top-level override (--config repeats=3).
    repeats: int = 1


def _path(error: jsonschema.ValidationError) -> str:
    text = ""
    for part in error.absolute_path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _with_defaults(validator_class):
    """A validator that also fills in the schema's defaults, as snakemake.utils.validate does."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _numbers_from_text(value: Any) -> Any:
    """'15' -> 15 in nested values: snakemake --config reads nested mappings as text."""
    if isinstance(value, dict):
        return {key: _numbers_from_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbers_from_text(item) for item in value]
    if isinstance(value, str):
        try:
            number = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return number
    return value


def check_config(config: Mapping[str, Any], schema_path: Path = SCHEMA, source: str = "config.yaml") -> dict:
    """Validate a config against the schema; return a copy with defaults filled in.

    The first problem is raised as ConfigError naming the key and the value,
    e.g. "config.yaml: sets.grid.vcpu[0]: 0 is less than or equal to the minimum of 0".
    """
    schema = yaml.safe_load(Path(schema_path).read_text())
    config = copy.deepcopy(dict(config))
    # Numbers given on the command line (--config 'load={duration_s: 15}') arrive as text.
    for section in ("load", "sets", "presets", "repeats"):
        if section in config:
            config[section] = _numbers_from_text(config[section])
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        # The deepest error is the most specific one ("vcpu[0]" rather than "sets").
        error = max(errors, key=lambda e: len(e.absolute_path))
        raise ConfigError(f"{source}: {_path(error)}: {error.message}")
    return config


def load_experiment(config: Mapping[str, Any], schema_path: Path = SCHEMA, source: str = "config.yaml") -> Experiment:
    config = check_config(config, schema_path, source)
    preset = config["preset"]
    if preset not in config["presets"]:
        known = ", ".join(sorted(config["presets"]))
        raise ConfigError(f"{source}: preset: {preset!r} is not one of the presets ({known})")
    chosen = config["presets"][preset]
    load = {**config["load"], **chosen.get("load", {})}
    try:
        conditions = expand_matrix(config["sets"], chosen["sets"])
        load_settings = LoadSettings(**load)
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None
    names = [host["name"] for host in config["hosts"]]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(f"{source}: hosts: name {duplicates[0]!r} is used twice")
    hosts = tuple(Host(h["name"], h.get("url"), h.get("tls")) for h in config["hosts"])
    repeats = config["repeats"] if config.get("repeats") is not None else chosen.get("repeats", 1)
    return Experiment(preset, tuple(conditions), load_settings, dict(config["image"]), hosts, repeats)
