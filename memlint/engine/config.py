"""`[tool.memlint]` in pyproject.toml: found, read, checked, turned into Settings.

Every mistake is reported as one line naming the file, the key and what was
expected, because a linter that silently ignores a misspelt `ignore` is worse
than one that refuses to start.
"""

from __future__ import annotations

import math
import os
import sys
import typing
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from memlint.rules import ALL_CODES, SEVERITIES, SYNTAX_ERROR_CODE
from memlint.rules.catalogue import CATALOGUE
from memlint.engine.settings import Settings

_CODE_LISTS = ("select", "ignore", "extend-select")
_PATTERN_LISTS = ("exclude", "extend-exclude")
#: per-file budgets: key -> (Settings field, unit); 0 in the file means no limit
BUDGETS = {"max-file-size": ("max_file_size_mb", "MB"),
           "file-timeout": ("file_timeout_s", "seconds"),
           "max-file-memory": ("max_file_memory_mb", "MB")}
_TOP_LEVEL_KEYS = (*_CODE_LISTS, *_PATTERN_LISTS, "per-file-ignores", *BUDGETS, "severity",
                   "fail-on", "respect-gitignore", "preview")
#: a rule's code by its code or its name (`[tool.memlint.MEM005]`, `tensor-history-kept`)
_CODES_BY_KEY = {**{e.code: e.code for e in CATALOGUE}, **{e.name: e.code for e in CATALOGUE}}


class ConfigError(Exception):
    """A configuration or command-line mistake; the message is the one line shown."""


def find_pyproject(start: str | os.PathLike) -> Path | None:
    """The nearest pyproject.toml with a [tool.memlint] table, from `start` upward.

    A pyproject.toml without that table is passed over (a sub-package's own
    pyproject does not switch memlint's configuration off), as ruff does.
    """
    directory = Path(start).resolve()
    if not directory.is_dir():
        directory = directory.parent
    for candidate in (directory, *directory.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and "memlint" in _read_table(pyproject):
            return pyproject
    return None


def common_parent(paths: Iterable[str]) -> str:
    """Where the configuration search starts: the deepest folder holding all paths."""
    absolute = [os.path.abspath(p) for p in paths if p != "-"]
    if not absolute:
        return os.getcwd()
    try:
        return os.path.commonpath(absolute)
    except ValueError:  # paths on different drives (Windows)
        return os.getcwd()


#: the environment variable that turns on the rules in preview in every front end
#: (flake8, pre-commit and the editor server take no `--preview`)
PREVIEW_VARIABLE = "MEMLINT_PREVIEW"


def load_settings(pyproject: Path | None) -> Settings:
    """Settings from `pyproject` ([tool.memlint]), or the defaults when there is
    none; `MEMLINT_PREVIEW=1` adds the rules in preview to either."""
    if pyproject is None:
        settings = Settings(root=os.getcwd())
    else:
        table = _read_table(pyproject).get("memlint", {})
        settings = settings_from_table(table, str(pyproject), root=str(pyproject.parent))
    return replace(settings, preview=True) if preview_from_environment() \
        else settings


def preview_from_environment() -> bool:
    value = os.environ.get(PREVIEW_VARIABLE, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ConfigError(f"{PREVIEW_VARIABLE}: expected 1 or 0 (true or false), got "
                      f"{os.environ[PREVIEW_VARIABLE]!r}")


def _read_table(pyproject: Path) -> dict:
    """The [tool] table of a pyproject.toml."""
    if sys.version_info >= (3, 11):  # imported here: a run without a pyproject never needs it
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        import tomli as tomllib
    try:
        with open(pyproject, "rb") as handle:
            document = tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{pyproject}: invalid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{pyproject}: invalid TOML: not UTF-8 (byte "
                          f"0x{error.object[error.start:error.start + 1].hex()} at offset "
                          f"{error.start})") from None
    except OSError as error:
        raise ConfigError(f"{pyproject}: cannot read it: {error.strerror or error}") from None
    except RecursionError:
        raise ConfigError(f"{pyproject}: invalid TOML: nested too deeply") from None
    tool = document.get("tool", {})
    return tool if isinstance(tool, dict) else {}


def settings_from_table(table: object, source: str, root: str = ".") -> Settings:
    """Check `[tool.memlint]` key by key and build Settings from it."""
    where = f"{source}: [tool.memlint]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table, got {_shown(table)}")
    values: dict[str, typing.Any] = {"root": root}  # each checked as it is read
    rule_options: dict[str, dict] = {}
    for key, value in table.items():
        if key in _CODE_LISTS:
            codes = _codes(value, f"{where} {key}", ignoring=key == "ignore")
            if key == "select" and not codes:
                raise ConfigError(f"{where} select: {NOTHING_SELECTED}")
            values[key.replace("-", "_")] = tuple(codes)
        elif key in BUDGETS:
            field_name, unit = BUDGETS[key]
            values[field_name] = budget(value, f"{where} {key}", unit)
        elif key in _PATTERN_LISTS:
            values[key.replace("-", "_")] = tuple(_strings(value, f"{where} {key}",
                                                           "a list of glob patterns"))
        elif key == "per-file-ignores":
            values["per_file_ignores"] = _per_file_ignores(value, f"{where} {key}")
        elif key == "severity":
            values["severities"] = _severities(value, f"{where} {key}")
        elif key == "fail-on":
            values["fail_on"] = severity_level(value, f"{where} {key}")
        elif key in ("respect-gitignore", "preview"):
            if not isinstance(value, bool):
                raise ConfigError(f"{where} {key}: expected true or false, got {_shown(value)}")
            values[key.replace("-", "_")] = value
        elif key in _CODES_BY_KEY:
            from memlint.rules import RULES_BY_CODE  # a rule's options: its class says which

            rule = RULES_BY_CODE[_CODES_BY_KEY[key]]
            if rule.code in rule_options:
                raise ConfigError(f"{where}: options for {rule.code} given twice "
                                  f"(as {rule.code} and as {rule.name})")
            rule_options[rule.code] = _rule_options(rule, value, f"{where}.{key}")
        else:
            known = ", ".join((*_TOP_LEVEL_KEYS, "<rule code or name>"))
            hint = did_you_mean(key, (*_TOP_LEVEL_KEYS, *_CODES_BY_KEY))
            raise ConfigError(f"{where}: unknown key {key!r}{hint}; expected one of {known}")
    return Settings(**values, rule_options=rule_options)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'select'?)` for the closest choice to a typo, or ''."""
    import difflib  # start-up: only a mistake needs it

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def describe_settings(settings: Settings, pyproject: Path | None) -> str:
    """`--show-settings`: the settings in force, written as the [tool.memlint]
    table that would set them (valid TOML: it can be pasted back)."""
    import json

    def value(item: object) -> str:
        return json.dumps(list(item) if isinstance(item, tuple) else item)
    top = {"select": settings.select, "extend-select": settings.extend_select,
           "ignore": settings.ignore, "exclude": settings.exclude,
           "extend-exclude": settings.extend_exclude,
           "respect-gitignore": settings.respect_gitignore, "preview": settings.preview,
           "max-file-size": settings.max_file_size_mb or 0,
           "file-timeout": settings.file_timeout_s or 0,
           "max-file-memory": settings.max_file_memory_mb or 0, "fail-on": settings.fail_on}
    tables: dict[str, Mapping[str, object]] = {"per-file-ignores": settings.per_file_ignores,
              "severity": {code: settings.severity_of(code) for code in ALL_CODES},
              **settings.rule_options}
    lines = [f"# configuration: {pyproject or 'none (the defaults)'}",
             f"# patterns relative to: {settings.root}", "[tool.memlint]",
             *(f"{key} = {value(item)}" for key, item in top.items())]
    for name, table in tables.items():
        lines += ["", f"[tool.memlint.{name}]",
                  *(f"{json.dumps(key)} = {value(item)}" for key, item in table.items())]
    return "\n".join(lines) + "\n"


def severity_level(value: object, what: str) -> str:
    if value not in SEVERITIES:
        raise ConfigError(f"{what}: expected one of {', '.join(reversed(SEVERITIES))}, "
                          f"got {_shown(value)}")
    return value


def _severities(value: object, what: str) -> dict[str, str]:
    """`{MEM005 = "note", tensor-history-kept = "warning"}`: codes or rule names."""
    if not isinstance(value, dict):
        raise ConfigError(f"{what}: expected a table of rule codes or names to severities, "
                          f"got {_shown(value)}")
    severities = {}
    for key, level in value.items():
        code = _CODES_BY_KEY.get(key) or (key if key == SYNTAX_ERROR_CODE else None)
        if code is None:
            raise ConfigError(f"{what}: unknown rule {key!r}{did_you_mean(key, _CODES_BY_KEY)}")
        severities[code] = severity_level(level, f"{what}.{key}")
    return severities


NOTHING_SELECTED = ("no rule codes given, so no rule would run; expected codes or prefixes "
                    "such as MEM003,MEM00")


def budget(value: object, what: str, unit: str) -> float | None:
    """A per-file limit: a finite number >= 0, where 0 means no limit."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 <= value < math.inf:
        raise ConfigError(f"{what}: expected a number of {unit} (0: no limit), "
                          f"got {_shown(value)}")
    return float(value) or None


def apply_overrides(settings: Settings, *, select=None, ignore=None, extend_select=None,
                    extend_ignore=None, extend_exclude=None, preview: bool = False,
                    budgets: Mapping[str, float | None] | None = None) -> Settings:
    """Command-line flags win: `--select` replaces the file's select and
    extend-select, `--ignore` its ignore; the extend flags add to either.
    `budgets` maps Settings' budget fields to the flags' values."""
    changes: dict[str, typing.Any] = dict(budgets or {})
    if preview:
        changes["preview"] = True
    if select is not None:
        changes["select"], changes["extend_select"] = tuple(select), ()
    if ignore is not None:
        changes["ignore"] = tuple(ignore)
    if extend_select:
        changes["extend_select"] = (*changes.get("extend_select", settings.extend_select),
                                    *extend_select)
    if extend_ignore:
        changes["ignore"] = (*changes.get("ignore", settings.ignore), *extend_ignore)
    if extend_exclude:
        changes["extend_exclude"] = (*settings.extend_exclude, *extend_exclude)
    return replace(settings, **changes)


def parse_codes(text: str, what: str, ignoring: bool = False) -> list[str]:
    """A comma-separated list of codes or prefixes from the command line."""
    return _codes([c for c in (part.strip() for part in text.split(",")) if c], what,
                  ignoring=ignoring)


def _codes(value: object, what: str, ignoring: bool = False) -> list[str]:
    expected = "a list of rule codes or prefixes such as [\"MEM003\", \"MEM00\"]"
    codes = _strings(value, what, expected)
    for code in codes:
        if not code or not any(known.startswith(code.upper()) for known in ALL_CODES):
            hint = did_you_mean(code.upper(), ALL_CODES)
            raise ConfigError(f"{what}: unknown rule code {code!r}{hint}; "
                              f"known codes are {', '.join(ALL_CODES)}")
        if ignoring and code.upper() == SYNTAX_ERROR_CODE:
            raise ConfigError(f"{what}: {SYNTAX_ERROR_CODE} (a file that cannot be read or "
                              f"parsed) is always reported and cannot be ignored")
    return [code.upper() for code in codes]


def _strings(value: object, what: str, expected: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what}: expected {expected}, got {_shown(value)}")
    return value


def _per_file_ignores(value: object, what: str) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict):
        raise ConfigError(f"{what}: expected a table of glob pattern = [rule codes], "
                          f"got {_shown(value)}")
    return {pattern: tuple(_codes(codes, f"{what} {pattern!r}", ignoring=True))
            for pattern, codes in value.items()}


def _rule_options(rule, value: object, what: str) -> dict:
    """A rule declares the options it reads as `OPTIONS = {"name": type}`."""
    declared: Mapping[str, object] = getattr(rule, "OPTIONS", {})
    if not isinstance(value, dict):
        raise ConfigError(f"{what}: expected a table of options for {rule.code} "
                          f"({rule.name}), got {_shown(value)}")
    for key, option in value.items():
        if key not in declared:
            known = ", ".join(declared) or "none"
            raise ConfigError(f"{what}: unknown option {key!r}{did_you_mean(key, declared)} "
                              f"for {rule.code} ({rule.name}); its options are: {known}")
        expected = declared[key]
        if not _has_type(option, expected):
            raise ConfigError(f"{what}: {key}: expected {_type_name(expected)}, "
                              f"got {_shown(option)}")
    return dict(value)


def _has_type(value: object, expected) -> bool:
    origin = typing.get_origin(expected)
    if origin is list:
        (item_type,) = typing.get_args(expected) or (object,)
        return isinstance(value, list) and all(_has_type(v, item_type) for v in value)
    if expected is int or expected is float:  # TOML booleans are not numbers here
        return isinstance(value, (int, float) if expected is float else int) \
            and not isinstance(value, bool)
    return isinstance(value, expected)


def _type_name(expected) -> str:
    if typing.get_origin(expected) is list:
        (item_type,) = typing.get_args(expected) or (object,)
        plural = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}
        return f"a list of {plural.get(item_type, getattr(item_type, '__name__', 'values'))}"
    return {bool: "a boolean", int: "an integer", float: "a number",
            str: "a string"}.get(expected, getattr(expected, "__name__", str(expected)))


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

