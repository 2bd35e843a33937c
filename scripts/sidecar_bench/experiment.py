"""The experiment as config.yaml describes it, validated, with the preset resolved."""

from __future__ import annotations

import copy
import functools
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import urlsplit

import yaml

# jsonschema is imported where a config is validated (check_config): a run job resolves the workflow's
# validated config and never validates, and the import is a tenth of a second of every run.
if TYPE_CHECKING:
    import jsonschema

from .adaptive import AdaptiveSettings, settings_from_config
from .conditions import (
    Condition,
    ConfigError,
    LoadSettings,
    expand_matrix,
    with_capacity_conditions,
)

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
    # Adaptive repetitions (adaptive.py): off unless adaptive.max_repeats is set.
    adaptive: AdaptiveSettings = AdaptiveSettings()


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

    import jsonschema

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _numbers_from_text(value: Any) -> Any:
    """'15' -> 15 in nested values: snakemake --config reads nested mappings as text."""
    if isinstance(value, dict):
        return {key: _numbers_from_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbers_from_text(item) for item in value]
    if isinstance(value, str):
        return _number_or_text(value)
    return value


@functools.lru_cache(maxsize=None)
def _number_or_text(text: str) -> Any:
    """The number YAML reads in text, else the text. Cached: a config repeats the same few words (app names, load
    models) hundreds of times (576 texts in the shipped one): 0.2 s of every snakemake start."""
    try:
        number = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(number, (int, float)) and not isinstance(number, bool):
        return number
    return text


def check_config(
    config: Mapping[str, Any], schema_path: Path = SCHEMA, source: str = "config.yaml"
) -> dict:
    """Validate a config against the schema; return a copy with defaults filled in.

    The first problem is raised as ConfigError naming the key and the value,
    e.g. "config.yaml: sets.grid.vcpu[0]: 0 is less than or equal to the minimum of 0".
    """
    schema = yaml.safe_load(Path(schema_path).read_text())
    config = copy.deepcopy(dict(config))
    if "preset" in config and config["preset"] in (None, ""):
        # `--config preset=` reads as None: say what is wrong rather than "None is not of type 'string'".
        known = ", ".join(sorted(config.get("presets") or {}))
        raise ConfigError(f"{source}: preset: empty; name one of the presets ({known})")
    # Numbers given on the command line (--config 'load={duration_s: 15}') arrive as text.
    for section in ("load", "sets", "presets", "repeats", "adaptive"):
        if section in config:
            config[section] = _numbers_from_text(config[section])
    import jsonschema

    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(
        validator.iter_errors(config),
        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))),
    )
    if errors:
        # The deepest error is the most specific one ("vcpu[0]" rather than "sets").
        error = max(errors, key=lambda e: len(e.absolute_path))
        raise ConfigError(f"{source}: {_path(error)}: {error.message}")
    return config


def load_experiment(
    config: Mapping[str, Any], schema_path: Path = SCHEMA, source: str = "config.yaml"
) -> Experiment:
    """The experiment a config describes: check_config, then resolve_experiment."""
    return resolve_experiment(check_config(config, schema_path, source), source)


def preset_load(default: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """A preset's load settings: config.yaml's load with the preset's own keys in place of its keys.

    A preset that sets warmup_s sets every app's warm-up: the default per-app warm-ups
    (load.app_warmup_s) are dropped unless the preset names its own. So `warmup_s: 0` means no
    warm-up for any app, as it reads, and a preset keeps the default's Next.js warm-up only by
    leaving warmup_s alone.
    """
    load = {**default, **own}
    if "warmup_s" in own and "app_warmup_s" not in own:
        load.pop("app_warmup_s", None)
    return load


def resolve_experiment(config: Mapping[str, Any], source: str = "config.yaml") -> Experiment:
    """The experiment of a config check_config has returned (validated, defaults filled in), without
    validating it again: the preset resolved, its matrix expanded, and what the schema cannot say checked
    (the preset exists, no set listed twice, host names unique, TLS files there, adaptive against repeats),
    with the same ConfigError messages naming key and value. The workflow validates once (common.smk) and
    resolves with this; its run jobs read the same checked config."""
    preset = config["preset"]
    if preset not in config["presets"]:
        known = ", ".join(sorted(config["presets"]))
        raise ConfigError(f"{source}: preset: {preset!r} is not one of the presets ({known})")
    chosen = config["presets"][preset]
    listed = chosen["sets"]
    twice = [name for i, name in enumerate(listed) if name in listed[:i]]
    if twice:
        raise ConfigError(f"{source}: presets.{preset}.sets: {twice[0]!r} is listed twice")
    load = preset_load(config["load"], chosen.get("load") or {})
    try:
        conditions = expand_matrix(config["sets"], chosen["sets"])
        # Open-loop conditions bring their rate's source: the setup's closed loop with idle sidecars.
        conditions = with_capacity_conditions(conditions)
        load_settings = LoadSettings(**load)
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None
    names = [host["name"] for host in config["hosts"]]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(f"{source}: hosts: name {duplicates[0]!r} is used twice")
    for index, host in enumerate(config["hosts"]):
        check_host(host, f"{source}: hosts[{index}]")
    hosts = tuple(Host(h["name"], h.get("url"), h.get("tls")) for h in config["hosts"])
    repeats = config["repeats"] if config.get("repeats") is not None else chosen.get("repeats", 1)
    try:
        adaptive = settings_from_config(config, preset)
        adaptive.check(repeats)
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None
    return Experiment(
        preset, tuple(conditions), load_settings, dict(config["image"]), hosts, repeats, adaptive
    )


def _is_loopback(hostname: str | None) -> bool:
    if hostname is None:
        return False
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def check_host(
    host: Mapping[str, Any], where: str, environ: Mapping[str, str] = os.environ
) -> None:
    """What can be checked of a host without reaching it: its TLS files exist and are files, and
    it is not a plain tcp:// engine beyond loopback (unless insecure_tcp: true says so).

    Whether the engine answers, and how many CPUs it has, is checked when a run starts
    (job.main), naming the host.
    """
    url = host.get("url")
    key = "url"
    if url is None and environ.get("DOCKER_HOST"):
        # url null means DOCKER_HOST; docker.from_env verifies TLS when DOCKER_TLS_VERIFY is set.
        url, key = environ["DOCKER_HOST"], "url (null: DOCKER_HOST)"
        tls = bool(environ.get("DOCKER_TLS_VERIFY"))
    else:
        tls = bool(host.get("tls"))
    if url and url.startswith("tcp://") and not tls and not host.get("insecure_tcp"):
        hostname = urlsplit(url).hostname
        if not _is_loopback(hostname):
            raise ConfigError(
                f"{where}.{key}: {url!r} is plain TCP without TLS to {hostname}, not loopback: anyone on the way can "
                f"read the engine's traffic and drive it, which is root on that machine (host {host['name']!r}). "
                "Use ssh://user@host, or tcp:// with tls (ca_cert, client_cert, client_key); or set "
                "insecure_tcp: true on this host to accept the risk"
            )
    for key, value in (host.get("tls") or {}).items():
        path = Path(value)
        if not path.is_file():
            reason = "is not a file" if path.exists() else "does not exist"
            raise ConfigError(
                f"{where}.tls.{key}: {value!r} {reason} (host {host['name']!r}, "
                f"working directory {Path.cwd()})"
            )
