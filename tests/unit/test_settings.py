from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from stint.config.settings import (
    Settings,
    SettingsError,
    env_name,
    field_range,
    load_settings,
    setting_infos,
    unknown_variables,
)
from stint.store.config import StoreConfig
from stint.store.errors import ConfigError

BOUNDED = [name for name, info in setting_infos().items() if info.spec.ge is not None]


@pytest.mark.parametrize("field_name", BOUNDED)
def test_out_of_range_value_names_the_variable_and_range(
    field_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    low, _ = field_range(field_name)
    variable = env_name(field_name)
    monkeypatch.setenv(variable, str(low - 1))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert variable in message
    assert "allowed range" in message


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("STINT_SLOTS", "many"),
        ("STINT_LEASE_SECONDS", "soon"),
        ("STINT_AUTO_MIGRATE", "perhaps"),
        ("STINT_LOG_LEVEL", "loud"),
        ("STINT_SCHEMA", "Robert'); DROP TABLE students;--"),
        ("STINT_SCHEMA", "pg_catalog"),
        ("STINT_SCHEMA", "9lives"),
    ],
)
def test_malformed_value_names_the_variable(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=variable):
        load_settings()


def test_database_url_is_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STINT_DATABASE_URL", "postgresql://u:hunter2@db/x")
    monkeypatch.setenv("STINT_SLOTS", "0")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "hunter2" not in str(caught.value)
    settings = load_settings(slots=2)
    assert "hunter2" not in repr(settings)


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STINT_SLOTS", "3")
    monkeypatch.setenv("STINT_PINS", "v1, v2")
    settings = load_settings(slots=7)
    assert settings.slots == 7
    assert settings.pins == ["v1", "v2"]
    assert settings.pool_size == 2


@pytest.mark.parametrize("name", ["a-b", "A", "x;y", "", "a" * 64, '"q"'])
def test_store_refuses_hostile_schema_names(name: str) -> None:
    with pytest.raises(ConfigError, match="plain identifier"):
        StoreConfig(conninfo="", schema=name)


def test_unknown_and_removed_variables_are_named_with_what_to_use() -> None:
    warnings = unknown_variables(
        {
            "STINT_SESSION_QUEUE_LIMIT": "1",  # removed: the database's limit applies
            "STINT_SLOTZ": "4",  # a typo
            "STINT_SLOTS": "4",  # a setting
            "STINT_SCHEMA": "s",  # a setting's alias
            "STINT_REQUIRE_BROWSER": "1",  # read by the tests, not by Settings
            "STINT_ZZZ_QQQ": "x",  # nothing close
            "PATH": "/bin",
        }
    )
    assert warnings == [
        "STINT_SESSION_QUEUE_LIMIT was removed and is ignored: the per-session queue limit "
        "is kept in the database now: stint admission set --default --max-session-queue N",
        "STINT_SLOTZ is not a Stint setting and is ignored; did you mean STINT_SLOTS?",
        "STINT_ZZZ_QQQ is not a Stint setting and is ignored",
    ]


def test_every_setting_is_known_to_the_unknown_variable_check() -> None:
    environ = {env_name(name): "x" for name in setting_infos()}
    assert unknown_variables(environ) == []


@pytest.mark.parametrize(
    ("variable", "given", "field_name", "expected"),
    [
        ("STINT_SLOTS", " 12 ", "slots", 12),
        ("STINT_SLOTS", "8.0", "slots", 8),
        ("STINT_LEASE_SECONDS", "1e1", "lease_seconds", 10.0),
        ("STINT_AUTO_MIGRATE", "off", "auto_migrate", False),
        ("STINT_AUTO_MIGRATE", "YES", "auto_migrate", True),
        ("STINT_LOG_LEVEL", "debug", "log_level", "debug"),
        ("STINT_DATA_DIR", "/srv/stint", "data_dir", Path("/srv/stint")),
        ("STINT_DATA_DIR", "", "data_dir", None),
        (
            "STINT_WEBHOOK_ALLOWED_NETWORKS",
            "10.0.0.0/8, ,fd00::/8",
            "webhook_allowed_networks",
            ["10.0.0.0/8", "fd00::/8"],
        ),
        ("stint_slots", "5", "slots", 5),  # names match ignoring case, as they always did
    ],
)
def test_values_are_read_as_their_setting_s_type(
    variable: str, given: str, field_name: str, expected: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, given)
    assert getattr(load_settings(), field_name) == expected


@pytest.mark.parametrize(
    ("variable", "given", "why"),
    [
        ("STINT_SLOTS", "2.5", "a valid integer, got a number with a fractional part"),
        ("STINT_LEASE_SECONDS", "nan", "a finite number"),
        ("STINT_LEASE_SECONDS", "inf", "a finite number"),
        ("STINT_LOG_FORMAT", "xml", "String should match pattern"),
        ("STINT_WEBHOOK_ALLOWED_NETWORKS", "10.0.0.0/8,everywhere", "is not a CIDR"),
        ("STINT_WEBHOOK_KEY", "c2hvcnQ=", "<hidden>"),
    ],
)
def test_a_refused_value_says_why(
    variable: str, given: str, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, given)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value).startswith(f"invalid configuration: {variable}=")
    assert why in str(caught.value)
    if variable == "STINT_WEBHOOK_KEY":
        assert given not in str(caught.value)


def test_every_bad_variable_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STINT_SLOTS", "0")
    monkeypatch.setenv("STINT_POOL_SIZE", "many")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        "invalid configuration: STINT_POOL_SIZE=many: Input should be a valid integer, unable "
        "to parse string as an integer (allowed range 1..64); STINT_SLOTS=0: Input should be "
        "greater than or equal to 1 (allowed range 1..256)"
    )


def test_a_flag_is_held_to_the_variable_s_rules() -> None:
    with pytest.raises(SettingsError, match="STINT_SLOTS=300: Input should be less than"):
        Settings(slots=300)
    assert Settings(slots=7.0).slots == 7  # type: ignore[arg-type]


def test_secrets_from_files_and_never_in_a_repr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = tmp_path / "url"
    url.write_text("postgresql://u:hunter2@db/x\n")
    monkeypatch.setenv("STINT_DATABASE_URL_FILE", str(url))
    settings = load_settings()
    assert settings.database_url.get_secret_value() == "postgresql://u:hunter2@db/x"
    assert settings.secrets() == ["hunter2"]
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.database_url)
    monkeypatch.setenv("STINT_DATABASE_URL", "postgresql://db/y")
    with pytest.raises(SettingsError, match="set STINT_DATABASE_URL or STINT_DATABASE_URL_FILE"):
        load_settings()
    monkeypatch.delenv("STINT_DATABASE_URL")
    url.write_text("  \n")
    with pytest.raises(SettingsError, match="the file is empty"):
        load_settings()
    monkeypatch.setenv("STINT_DATABASE_URL_FILE", str(tmp_path / "missing"))
    with pytest.raises(SettingsError, match="cannot read it: No such file"):
        load_settings()


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.slots = 2  # type: ignore[misc]
