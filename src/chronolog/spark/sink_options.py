"""The `chronolog` sink's options and the checks made on the driver before any task starts: Spark's Kafka
sink options (`KafkaSourceProvider`) parsed into `SinkOptions`, the DataFrame's schema against
`KafkaWriter.validateQuery`'s rules, and the `kafka.*` producer settings against librdkafka, so a mistake is
one line before anything is written. The writer is `spark.sink`; the checks of a task's rows
`spark.sink_rows`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from chronolog.errors import ChronologError
from chronolog.spark.native_writer import unsupported_settings

# Spark's Kafka sink refuses these (KafkaSourceProvider.validateGeneralOptions / kafkaParamsForProducer):
# keys and values are bytes, and the sink owns the serializers.
REFUSED = {"key.serializer": "keys are written as bytes (binary or UTF-8 string column)",
           "value.serializer": "values are written as bytes (binary or UTF-8 string column)"}
PATHS = ("auto", "native", "librdkafka")


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    producer: dict[str, str] = field(default_factory=dict)
    exactly_once: bool = False
    transactional_prefix: str | None = None
    path: str = "auto"  # the `producer` option: auto, native or librdkafka
    # (topic, partition count, max.message.bytes) looked up once on the driver for the `topic` option, so
    # tasks do not each ask the broker (a Python worker keeps what it looked up for the query's life anyway)
    facts: tuple[tuple[str, int, int], ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SinkOptions:
        opts = {k.lower(): (k, v) for k, v in raw.items()}
        if "path" in opts:
            raise ChronologError("the chronolog sink writes through a broker: give kafka.bootstrap.servers, not path")
        bootstrap = opts.get("kafka.bootstrap.servers", (None, None))[1]
        if not bootstrap:
            raise ChronologError("option kafka.bootstrap.servers is required to write")
        producer: dict[str, str] = {}
        for low, (_name, value) in opts.items():
            if low.startswith("kafka.") and low != "kafka.bootstrap.servers":
                key = low[len("kafka."):]
                if key in REFUSED:
                    raise ChronologError(f"option kafka.{key} is not supported: {REFUSED[key]}")
                producer[key] = value
        # the Java client's names Spark's Kafka sink users give (a PLAIN/SCRAM `sasl.jaas.config`), in
        # librdkafka's words, as the source translates them
        from chronolog.timetravel.client import from_java
        producer = from_java(producer)
        exactly = opts.get("exactlyonce", (None, "false"))[1].strip().lower()
        if exactly not in ("true", "false"):
            raise ChronologError(f"option exactlyOnce takes true or false, got {exactly!r}")
        prefix = producer.pop("transactional.id", None)
        if prefix is not None and exactly != "true":
            raise ChronologError("option kafka.transactional.id is the prefix of the sink's transactional ids: "
                                 "it needs exactlyOnce=true")
        path = opts.get("producer", (None, "auto"))[1].strip().lower()
        if path not in PATHS:
            raise ChronologError(f"option producer takes {', '.join(PATHS)}, got {path!r}")
        if path == "native":
            refused = unsupported_settings(producer)
            if exactly == "true":
                raise ChronologError("option producer=native: exactlyOnce writes through librdkafka's transactions")
            if refused:
                raise ChronologError(f"option producer=native cannot honour kafka.{', kafka.'.join(refused)}: "
                                     "leave producer unset (librdkafka then writes) or drop them")
        known = {"kafka.bootstrap.servers", "topic", "exactlyonce", "producer", "checkpointlocation"}  # the last is Spark's
        unknown = sorted(name for low, (name, _v) in opts.items() if low not in known and not low.startswith("kafka."))
        if unknown:
            raise ChronologError(f"option {', '.join(unknown)}: not a sink option (topic, kafka.*, exactlyOnce)")
        topic = opts.get("topic", (None, None))[1] or None
        if exactly == "true" and topic is None:
            raise ChronologError("exactlyOnce=true needs the option 'topic' (the batch markers are kept against it)")
        return cls(bootstrap=bootstrap, topic=topic, producer=producer, exactly_once=exactly == "true",
                   transactional_prefix=prefix, path=path)

    def producer_config(self) -> dict:
        return {"bootstrap.servers": self.bootstrap, **self.producer}


def check_schema(schema: StructType, options: SinkOptions) -> None:
    """KafkaWriter.validateQuery's rules (plus `timestamp`), on the driver before any task runs."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise ChronologError("required attribute 'value' not found: the sink writes the column 'value'")

    def expect(name: str, ok: bool, wanted: str) -> None:
        if name in fields and not ok:
            raise ChronologError(f"{name} attribute type must be {wanted}, got {fields[name].simpleString()}")

    expect("value", isinstance(fields.get("value"), StringType | BinaryType), "a string or binary")
    expect("key", isinstance(fields.get("key"), StringType | BinaryType), "a string or binary")
    expect("topic", isinstance(fields.get("topic"), StringType), "a string")
    expect("partition", isinstance(fields.get("partition"), IntegerType), "an int")
    expect("timestamp", isinstance(fields.get("timestamp"), TimestampType), "a timestamp")
    headers = fields.get("headers")
    ok = (isinstance(headers, ArrayType) and isinstance(headers.elementType, StructType)
          and [(f.name, type(f.dataType)) for f in headers.elementType.fields]
          == [("key", StringType), ("value", BinaryType)])
    expect("headers", ok, "array<struct<key: string, value: binary>>")
    if options.topic is None and "topic" not in fields:
        raise ChronologError("topic option required when no 'topic' attribute is present in the data")


def check_config(options: SinkOptions) -> None:
    """librdkafka refuses an unknown or malformed setting when the producer is made: make one on the
    driver so a bad kafka.* option is one line before any task starts."""
    from confluent_kafka import KafkaException, Producer

    from chronolog.timetravel.client import kafka_error_text
    try:
        Producer(options.producer_config())
    except (KafkaException, ValueError, TypeError) as exc:
        raise ChronologError(f"kafka.* producer option: {kafka_error_text(exc)}") from None
