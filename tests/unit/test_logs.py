"""JSON log lines: one object per record, with the fields bound where it was made,
secrets masked in the message and in every extra field."""

from __future__ import annotations

import asyncio
import io
import json
import logging

from stint.config.logs import JsonFormatter, SecretFilter, bind_process_fields, log_fields


def _logger() -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(SecretFilter(["hunter2"]))
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("stint.test.json")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, out


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


async def test_each_task_logs_its_own_turn_fields() -> None:
    logger, out = _logger()
    bind_process_fields(worker="w1")

    async def turn(name: str) -> None:
        with log_fields(session=f"s-{name}", turn=f"t-{name}", epoch=3):
            await asyncio.sleep(0)
            logger.info("turn %s done", name, extra={"status": "succeeded"})

    await asyncio.gather(turn("a"), turn("b"))
    logger.info("outside")
    a, b, outside = _lines(out)
    assert (a["session"], a["turn"], a["epoch"], a["worker"]) == ("s-a", "t-a", 3, "w1")
    assert (b["session"], b["message"], b["status"]) == ("s-b", "turn b done", "succeeded")
    assert "session" not in outside and outside["worker"] == "w1"
    assert {"ts", "level", "logger"} <= set(outside)


def test_secrets_are_masked_in_the_message_extras_and_traceback() -> None:
    logger, out = _logger()
    try:
        raise RuntimeError("password hunter2\nsecond line")
    except RuntimeError:
        logger.exception("failed with hunter2", extra={"url": "postgresql://u:hunter2@h/db"})
    (line,) = _lines(out)
    assert "hunter2" not in json.dumps(line)
    assert line["message"] == "failed with ***" or "hunter2" not in str(line["message"])
    assert "RuntimeError" in str(line["exc"])
