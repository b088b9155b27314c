"""The pytest plugin (entry point `chronolog` in the `pytest11` group, so installing chronolog turns it on;
`pytest -p no:chronolog` turns it off).

Loading it costs nothing: this module imports only pytest, and no broker starts unless a test asks for a
fixture. Fixtures, all prefixed `chronolog_` so they cannot shadow a project's own:

- `chronolog_broker` (session): a TestBroker (`.bootstrap`, `.data_dir`, `.create_topic()`, `.faults`,
  `.admin_url`, `.client_config()`); one per xdist worker, its data under pytest's tmp dir, removed after
  the session.
- `chronolog_topic`: a fresh topic for one test (its name), partitions and configs from the
  `@pytest.mark.chronolog_topic(partitions=3, configs={...})` marker; deleted after the test.
- `chronolog_faults`: the broker's faults, cleared after the test (so one test's faults never leak into
  the next); a rule that never fired is reported first as a `FaultNotHitWarning` (with why: an OffsetCommit
  rule for a client that commits through TxnOffsetCommit, a topic no request named...).
- `chronolog_topics`: a function making more topics for one test (`chronolog_topics(partitions=2)` -> the
  name), all deleted after it. Topics made with `chronolog_broker.create_topic()` live until the session's
  broker stops and its data dir is removed.

ini options: `chronolog_broker_configs` (key=value lines), `chronolog_sasl_users` (user:password lines),
`chronolog_tls` (true: a TLS listener with a fresh CA), `chronolog_keep_data` (true: keep the data dir).
"""

from __future__ import annotations

import re
import shutil
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

MARKER = "chronolog_topic"
_MARKER_ARGS = {"partitions", "configs", "name"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("chronolog_broker_configs", type="linelist", default=[],
                  help="chronolog: broker configs of the chronolog_broker fixture, one key=value a line")
    parser.addini("chronolog_sasl_users", type="linelist", default=[],
                  help="chronolog: SASL users (user:password, one a line): the broker listens with SASL")
    parser.addini("chronolog_tls", type="bool", default=False,
                  help="chronolog: the broker listens with TLS (a fresh CA; needs trustme)")
    parser.addini("chronolog_keep_data", type="bool", default=False,
                  help="chronolog: keep the broker's data dir after the session (to look at it)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(partitions=1, configs=None, name=None): the chronolog_topic "
                                       "fixture's partitions, topic configs and name")


def _pairs(lines: list[str], sep: str, what: str) -> dict[str, str]:
    out = {}
    for line in lines:
        key, found, value = line.partition(sep)
        if not found or not key.strip():
            pytest.fail(f"{what}: {line!r} is not {'key=value' if sep == '=' else 'user:password'}", pytrace=False)
        out[key.strip()] = value.strip()
    return out


@pytest.fixture(scope="session")
def chronolog_broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Any]:
    """A chronolog broker for this session (this xdist worker), in this process."""
    from chronolog.testing.runner import TestBroker

    configs = _pairs(pytestconfig.getini("chronolog_broker_configs"), "=", "chronolog_broker_configs")
    users = _pairs(pytestconfig.getini("chronolog_sasl_users"), ":", "chronolog_sasl_users")
    keep = bool(pytestconfig.getini("chronolog_keep_data"))
    base = tmp_path_factory.mktemp("chronolog")
    broker = TestBroker(base / "data", configs=configs, users=users, tls=bool(pytestconfig.getini("chronolog_tls")),
                        admin_api=True, keep_data=True)
    refused = None
    try:
        broker.start()
    except Exception as exc:  # a bad config, a missing trustme: the setup error in one line
        shutil.rmtree(base, ignore_errors=True)
        refused = f"chronolog_broker: {exc}"
    if refused is not None:
        pytest.fail(refused, pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def chronolog_faults(chronolog_broker: Any) -> Iterator[Any]:
    """The broker's programmable faults; everything programmed is cleared after the test, and a rule that
    never fired is warned about (FaultNotHitWarning: the test did not exercise what it meant to)."""
    from chronolog.testing.faults import FaultNotHitWarning

    faults = chronolog_broker.faults
    yield faults
    try:
        for line in faults.unhit():
            warnings.warn(FaultNotHitWarning(f"chronolog_faults: {line}"), stacklevel=1)
    finally:
        faults.clear()


@pytest.fixture
def chronolog_topics(request: pytest.FixtureRequest, chronolog_broker: Any) -> Iterator[Any]:
    """A function that makes topics for this test (`(partitions=1, configs=None, name=None) -> name`), each
    deleted after the test, as `chronolog_topic` is."""
    prefix = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name)[:60].strip("-") or "test"
    made: list[str] = []

    def make(partitions: int = 1, configs: dict[str, str] | None = None, name: str | None = None) -> str:
        topic = chronolog_broker.create_topic(name, int(partitions), configs, prefix=prefix)
        made.append(topic)
        return topic

    yield make
    _delete(chronolog_broker, made)


def _delete(broker: Any, topics: list[str]) -> None:
    if broker.running:
        for name in topics:
            try:
                broker.delete_topic(name)
            except Exception:  # the test deleted it itself
                pass


@pytest.fixture
def chronolog_topic(request: pytest.FixtureRequest, chronolog_broker: Any) -> Iterator[str]:
    """A topic of its own for this test (its name), deleted afterwards."""
    marker = request.node.get_closest_marker(MARKER)
    kwargs: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    unknown = set(kwargs) - _MARKER_ARGS
    if marker is not None and (marker.args or unknown):
        pytest.fail(f"@pytest.mark.{MARKER} takes only keyword arguments {sorted(_MARKER_ARGS)}, "
                    f"not {sorted(unknown) or list(marker.args)}", pytrace=False)
    prefix = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name)[:60].strip("-") or "test"
    try:
        name = chronolog_broker.create_topic(kwargs.get("name"), int(kwargs.get("partitions", 1)),
                                             kwargs.get("configs"), prefix=prefix)
        refused = None
    except Exception as exc:  # a bad config or partition count: the test's setup, in one line
        refused = f"chronolog_topic: {exc}"
    if refused is not None:
        pytest.fail(refused, pytrace=False)
    yield name
    _delete(chronolog_broker, [name])
