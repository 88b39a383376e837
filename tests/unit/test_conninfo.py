"""Connection strings are parsed once and never echoed; log lines mask secrets."""

from __future__ import annotations

import logging

import pytest

from stint.config.logs import SecretFilter
from stint.store.conninfo import parse_conninfo
from stint.store.errors import ConfigError
from stint.store.redaction import redact

SECRET = "s3cr3t-Pw"


@pytest.mark.parametrize(
    "text",
    [
        f"postgresql://app:{SECRET}@db/x",
        f"postgres://app:{SECRET}@h1:5432,h2:5433/x?sslmode=require",
        # An HA cluster: every member, libpq keeps the one that takes writes (guide/ha.md).
        f"host=pg1,pg2,pg3 port=5432,5432,5432 password={SECRET} "
        "target_session_attrs=read-write connect_timeout=2",
        f"host=db password={SECRET} dbname=x",
        f"host=db password='{SECRET} with space' dbname=x",
        f"postgresql://app@db/x?password={SECRET}",
    ],
)
def test_valid_strings_parse_and_show_no_password(text: str) -> None:
    parsed = parse_conninfo(text)
    assert parsed.conninfo == text
    assert parsed.password is not None and SECRET in parsed.password
    assert SECRET not in parsed.shown
    assert SECRET not in repr(parsed)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f"postgresql+psycopg://app:{SECRET}@db/x", "not PostgreSQL's scheme"),
        (f"postgresql://app:{SECRET}@[::1/x", 'matching "]"'),
        (f"postgresql://app:{SECRET}%zz@db/x", "invalid percent-encoded token"),
        (f"postgresql://app:{SECRET} x@db/x", "unexpected spaces"),
        (f"host=db password='{SECRET}", "unterminated quoted string"),
        (f"host=db password={SECRET} nonsense", 'missing "="'),
    ],
)
def test_malformed_strings_are_refused_with_the_reason_and_no_password(
    text: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_conninfo(text)
    assert reason in str(caught.value)
    assert SECRET not in str(caught.value)
    assert caught.value.__cause__ is None  # the driver's message (with the text) is dropped


def test_redact_masks_url_and_keyword_passwords() -> None:
    assert redact(f"postgresql://u:{SECRET}@h/d") == "postgresql://u:****@h/d"
    assert redact(f"host=h password={SECRET}") == "host=h password=****"
    assert redact("postgresql://u@h/d") == "postgresql://u@h/d"


def test_log_filter_masks_secrets_and_folds_lines(caplog: pytest.LogCaptureFixture) -> None:
    record = logging.LogRecord(
        "psycopg.pool", logging.WARNING, __file__, 1, "error: %s", (f"a\n\tb {SECRET}",), None
    )
    SecretFilter([SECRET]).filter(record)
    assert record.getMessage() == "error: a b ****"
