"""Where each setting's value comes from: its default, a TOML file, a ``COHORT_*`` environment variable or
a ``--dotted.name`` flag of ``cohort serve``, and which of them wins.

Precedence when several sources set one value: flag > env > file > default. `resolve_config` remembers
where each effective value came from (``cohort config show`` prints it; secrets never). Unknown names
in any source are refused with the closest known one as a hint.
"""
from __future__ import annotations

import argparse
import difflib
import enum
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from cohort.coordinator.config import (
    CONFIG_FILE_ENV,
    ENV_PREFIX,
    NOT_SETTINGS_ENV,
    SETTINGS,
    SETTINGS_BY_NAME,
    ConfigError,
    CoordinatorConfig,
    SecretKind,
    Setting,
)

_SETTINGS_BY_ENV: dict[str, Setting] = {s.env_var: s for s in SETTINGS}


class SourceKind(enum.Enum):
    DEFAULT = "default"
    FILE = "file"
    ENV = "env"
    FLAG = "flag"


@dataclass(frozen=True, slots=True)
class ValueSource:
    kind: SourceKind
    detail: str = ""  # the file path, env var or flag spelling

    def __str__(self) -> str:
        return self.kind.value if not self.detail else f"{self.kind.value} {self.detail}"


@dataclass(frozen=True, slots=True)
class EffectiveConfig:
    """A config plus where each value came from (for ``cohort config show``)."""

    config: CoordinatorConfig
    sources: Mapping[str, ValueSource]  # by dotted setting name
    config_file: Path | None = None

    def rows(self) -> list[tuple[str, Any, ValueSource]]:
        return [(s.name, _shown(s, getattr(self.config, s.attr)), self.sources[s.name]) for s in SETTINGS]


def _shown(spec: "Setting", value: Any) -> Any:
    """A value as `cohort config show` may print it: secrets never."""
    return "[hidden]" if isinstance(spec.kind, SecretKind) and value is not None else value


def _unknown(key: str, where: str) -> ConfigError:
    close = difflib.get_close_matches(key, SETTINGS_BY_NAME, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return ConfigError(f"unknown setting {key!r} in {where}{hint}")


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML bare dotted keys nest (a.b = 1 is {a: {b: 1}}); settings are flat."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name not in SETTINGS_BY_NAME:
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a TOML config file into {dotted name: value}; ConfigError on any problem."""
    import tomllib

    try:
        with open(path, "rb") as fh:
            table = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    flat = _flatten(table)
    for key in flat:
        if key not in SETTINGS_BY_NAME:
            raise _unknown(key, f"config file {path}")
    return flat


def resolve_config(
    flags: Mapping[str, tuple[str, str]] | None = None,
    environ: Mapping[str, str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
) -> EffectiveConfig:
    """Combine defaults, a TOML file, ``COHORT_*`` env vars and flags.

    `flags` maps dotted setting names to (text value, flag spelling) as given
    on the command line. The file is `config_file`, else ``$COHORT_CONFIG``.
    Unknown ``COHORT_*`` env vars are refused like unknown file keys: a typo
    silently ignored is the mistake operators find in production.
    """
    flags = flags or {}
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, ValueSource] = {s.name: ValueSource(SourceKind.DEFAULT) for s in SETTINGS}

    path: Path | None = None
    if config_file is not None and str(config_file) != "":
        path = Path(config_file)
    elif environ.get(CONFIG_FILE_ENV):
        path = Path(environ[CONFIG_FILE_ENV])
    if path is not None:
        for name, raw in read_config_file(path).items():
            spec = SETTINGS_BY_NAME[name]
            source = ValueSource(SourceKind.FILE, str(path))
            values[name] = _checked(spec, raw, source, from_text=False)
            sources[name] = source

    for var, text in environ.items():
        if not var.startswith(ENV_PREFIX) or var in NOT_SETTINGS_ENV:
            continue
        spec = _SETTINGS_BY_ENV.get(var)
        if spec is None:
            close = difflib.get_close_matches(var, _SETTINGS_BY_ENV, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"unknown setting in environment variable {var}{hint}")
        source = ValueSource(SourceKind.ENV, var)
        values[spec.name] = _checked(spec, text, source, from_text=True)
        sources[spec.name] = source

    for name, (text, spelling) in flags.items():
        spec = SETTINGS_BY_NAME.get(name)
        if spec is None:
            raise _unknown(name, "command-line flags")
        source = ValueSource(SourceKind.FLAG, spelling)
        values[name] = _checked(spec, text, source, from_text=True)
        sources[name] = source

    config = CoordinatorConfig(**{SETTINGS_BY_NAME[name].attr: v for name, v in values.items()})
    return EffectiveConfig(config=config, sources=sources, config_file=path)


def _checked(spec: Setting, raw: Any, source: ValueSource, *, from_text: bool) -> Any:
    try:
        value = spec.kind.parse_text(raw) if from_text else raw
        return spec.kind.check(value)
    except ValueError as exc:
        raise ConfigError(f"invalid {spec.name} (from {source}): {exc}") from None


# --------------------------------------------------------------------------
# Command-line flags.
# --------------------------------------------------------------------------

_FLAGS_DEST = "config_flags"


class _SettingFlag(argparse.Action):
    """Collects a setting flag as {name: (text, spelling)} so sources are known.

    `const` carries the setting's dotted name.
    """

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        collected = dict(getattr(namespace, _FLAGS_DEST, None) or {})
        collected[self.const] = (values, option_string or self.option_strings[0])
        setattr(namespace, _FLAGS_DEST, collected)


# `cohort serve --help` lists the settings by area: each area starts at the setting named here (the
# fields of `CoordinatorConfig` are declared area by area).
SETTING_AREAS: dict[str, str] = {
    "listeners": "server: listeners, data directory, node id, workers",
    "cluster": "cluster mode (etcd)",
    "group.min.session.timeout.ms": "consumer groups",
    "offset.metadata.max.bytes": "committed offsets and the offsets log",
    "auto.create.topics.enable": "topics and fetches",
    "socket.request.max.bytes": "connections and request limits",
    "sasl.enabled.mechanisms": "security: SASL, authorization, TLS",
    "metrics.listen": "operations: metrics, console, logging, shutdown",
}


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config FILE`` and one flag per setting (plus short aliases), grouped by area."""
    parser.set_defaults(**{_FLAGS_DEST: None})
    parser.add_argument(
        "--config", metavar="FILE", default=None,
        help=f"TOML config file (default: ${CONFIG_FILE_ENV} if set). Precedence: flag > env > file > default. "
             f"Every setting below is also read from that file (same dotted name) and from the environment "
             f"({ENV_PREFIX}<NAME>, dots as underscores, upper case).",
    )
    group = parser.add_argument_group("settings")
    for spec in SETTINGS:
        if spec.name in SETTING_AREAS:
            group = parser.add_argument_group(SETTING_AREAS[spec.name])
        default = "unset" if spec.default is None else spec.default
        flags = dict.fromkeys((*spec.aliases, spec.flag))  # an alias may be the flag itself (--workers)
        group.add_argument(
            *flags,
            dest=f"_setting_{spec.attr}", action=_SettingFlag, const=spec.name, default=argparse.SUPPRESS,
            metavar=spec.kind.metavar, help=f"{spec.doc} [{spec.kind.describe()}; default {default}; env {spec.env_var}]",
        )


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> EffectiveConfig:
    """Resolve the effective config from parsed flags, env and the config file."""
    return resolve_config(getattr(args, _FLAGS_DEST, None) or {}, environ, getattr(args, "config", None))
