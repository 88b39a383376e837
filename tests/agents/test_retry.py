"""Provider retry rules: which answers are retried and how long to wait."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

from stint.agents.retry import RetryPolicy, is_retryable_status, retry_after_seconds


def test_retryable_statuses() -> None:
    assert all(is_retryable_status(s) for s in (408, 409, 429, 500, 502, 503, 529))
    assert not any(is_retryable_status(s) for s in (400, 401, 403, 404, 422))


def test_retry_after_ms_wins_over_seconds() -> None:
    assert retry_after_seconds({"Retry-After-Ms": "250", "retry-after": "3"}) == 0.25
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({}) is None
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({"retry-after": "-1"}) is None


def test_retry_after_as_an_http_date() -> None:
    now = 1_800_000_000.0
    date = format_datetime(datetime.fromtimestamp(now + 7, UTC), usegmt=True)
    assert retry_after_seconds({"retry-after": date}, now=now) == 7.0


def test_policy_caps_waits_and_backs_off() -> None:
    policy = RetryPolicy(max_attempts=5, first=1.0, cap=4.0)
    assert policy.delay(1, 120.0) == 4.0
    assert policy.delay(1, 0.5) == 0.5
    assert 0.5 <= policy.delay(1, None) <= 1.0
    assert 2.0 <= policy.delay(5, None) <= 4.0
