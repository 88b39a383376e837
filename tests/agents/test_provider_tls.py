"""``python -m stint.lab.provider_tls``: the agents harness's client against a
provider served over TLS from another process keeps one connection for every call
(before the transport continued one reader of a body, each call opened its own)."""

from __future__ import annotations

import json

import pytest

from stint.lab.provider_tls import main


def test_calls_over_tls_share_one_connection(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--calls", "5"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["calls"] == 5
    assert figures["connections"] == 1  # the warm-up call's, reused by all five


def test_a_count_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--calls", "0"])
    assert stopped.value.code == 2
    assert "--calls must be at least 1" in capsys.readouterr().err
