from __future__ import annotations

import pytest

from stint.config.settings import (
    Settings,
    SettingsError,
    env_name,
    load_settings,
    unknown_variables,
)
from stint.store.config import StoreConfig
from stint.store.errors import ConfigError

BOUNDED = [
    name
    for name, info in Settings.model_fields.items()
    if any(hasattr(m, "ge") for m in info.metadata)
]


@pytest.mark.parametrize("field_name", BOUNDED)
def test_out_of_range_value_names_the_variable_and_range(
    field_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = Settings.model_fields[field_name]
    low = next(m.ge for m in info.metadata if hasattr(m, "ge"))
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
    environ = {env_name(name): "x" for name in Settings.model_fields}
    assert unknown_variables(environ) == []
