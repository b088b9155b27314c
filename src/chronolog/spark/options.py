"""Spark's Kafka source option names and precedence, parsed once on the driver (no Spark imports)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from chronolog.errors import ChronologError
from chronolog.timetravel.timefmt import parse_time


def _ts(value: str | None) -> int | None:
    return None if value is None or value == "" else parse_time(value)


@dataclass(frozen=True)
class SourceOptions:
    path: str | None
    bootstrap: str | None
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: dict[str, list[int]] | None
    starting_timestamp: int | None
    ending_timestamp: int | None
    starting_by_timestamp: dict[str, dict[str, int]] | None
    ending_by_timestamp: dict[str, dict[str, int]] | None
    starting_offsets: str | dict | None
    ending_offsets: str | dict | None
    strategy: str
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    max_lateness_ms: int | None
    kafka_conf: dict[str, str] = field(default_factory=dict)  # every `kafka.*` option but bootstrap.servers, without the prefix

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        opts = {k.lower(): v for k, v in raw.items()}
        path = opts.get("path")
        if path is not None and "://" not in path:
            path = os.path.abspath(path)  # executors may run in another working directory
        bootstrap = opts.get("kafka.bootstrap.servers")
        if (path is None) == (bootstrap is None):
            raise ChronologError("give exactly one of the options 'path' (a data dir) and 'kafka.bootstrap.servers'")
        chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
        if len(chosen) != 1:
            raise ChronologError("give exactly one of 'subscribe', 'subscribePattern' and 'assign'")

        def js(key: str):
            if key not in opts:
                return None
            try:
                return json.loads(opts[key])
            except ValueError:
                raise ChronologError(f"option {key}: not valid JSON") from None

        def offsets(key: str):
            value = opts.get(key)
            if value is None or value in ("earliest", "latest"):
                return value
            return js(key)

        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise ChronologError("startingOffsetsByTimestampStrategy is 'error' or 'latest'")
        return cls(
            path=path, bootstrap=bootstrap,
            subscribe=tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip()) if "subscribe" in opts else None,
            subscribe_pattern=opts.get("subscribepattern"),
            assign=js("assign"),
            starting_timestamp=_ts(opts.get("startingtimestamp")),
            ending_timestamp=_ts(opts.get("endingtimestamp")),
            starting_by_timestamp=js("startingoffsetsbytimestamp"),
            ending_by_timestamp=js("endingoffsetsbytimestamp"),
            starting_offsets=offsets("startingoffsets"), ending_offsets=offsets("endingoffsets"),
            strategy=strategy,
            min_partitions=int(opts["minpartitions"]) if "minpartitions" in opts else None,
            max_records_per_partition=int(opts["maxrecordsperpartition"]) if "maxrecordsperpartition" in opts else None,
            max_offsets_per_trigger=int(opts["maxoffsetspertrigger"]) if "maxoffsetspertrigger" in opts else None,
            fail_on_data_loss=_boolean(opts, "failondataloss", "failOnDataLoss", True),
            include_headers=opts.get("includeheaders", "false").lower() == "true",
            max_lateness_ms=int(opts["maxlatenessms"]) if "maxlatenessms" in opts else None,
            kafka_conf=_client_conf(_kafka_conf(raw)),
        )

    @property
    def isolation_level(self) -> str:
        return self.kafka_conf.get("isolation.level", "read_uncommitted")

    def topics(self, available: list[str]) -> list[tuple[str, list[int] | None]]:
        """(topic, partitions or None for all), per subscribe / subscribePattern / assign."""
        if self.assign is not None:
            return [(t, list(ps)) for t, ps in self.assign.items()]
        if self.subscribe is not None:
            return [(t, None) for t in self.subscribe]
        pattern = re.compile(self.subscribe_pattern or "")
        return [(t, None) for t in sorted(available) if pattern.fullmatch(t)]


def _client_conf(conf: dict[str, str]) -> dict[str, str]:
    """The Java client's names Spark users give (`kafka.sasl.jaas.config` with a PLAIN or SCRAM login module)
    in librdkafka's words, which the planner's client and the librdkafka reader take; a JKS truststore is
    one line naming the PEM option to use (`timetravel.client.from_java`)."""
    from chronolog.timetravel.client import from_java
    return from_java(conf)


def _kafka_conf(raw: Mapping[str, str]) -> dict[str, str]:
    """Spark passes `kafka.`-prefixed options to its Kafka consumer; so do we (to librdkafka, or to the raw
    fetcher for the ones it honours). Names keep their case after the prefix (client options are
    lower-case dotted names). `isolation.level` defaults to read_uncommitted, as Spark's Kafka source's
    consumer (Kafka's `ConsumerConfig`) does."""
    out = {}
    for key, value in raw.items():
        if key.lower().startswith("kafka.") and key.lower() != "kafka.bootstrap.servers":
            out[key[len("kafka."):]] = str(value)
    level = out.get("isolation.level")
    if level is not None and level not in ("read_uncommitted", "read_committed"):
        raise ChronologError("kafka.isolation.level is 'read_uncommitted' or 'read_committed'")
    return out


def _boolean(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    """`true` / `false` (any case), as Spark reads its boolean options; anything else is refused rather
    than read as false (an option we accept but do not honour would be a bug)."""
    value = opts.get(key)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise ChronologError(f"option {name} takes true or false, got {value!r}")
    return value.strip().lower() == "true"
