"""librdkafka's errors as the tools say them: in their own words, with what to do, in one line."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from chronolog.timetravel.sources import _WORDS, kafka_words


def test_the_dead_leader_error_of_a_cluster_is_said_in_our_words():
    # what `chronolog offsets` printed while a killed node's leaders moved (issue: users' report)
    exc = KafkaException(KafkaError(KafkaError._DESTROY_BROKER,
                                    "Failed to get watermark offsets: Local: Broker handle destroyed"))
    text = kafka_words(exc)
    assert "Broker handle" not in text and "Failed to get" not in text
    assert "start that broker again" in text and text.endswith("[DESTROY_BROKER]")


def test_every_listed_code_is_one_line_with_what_to_do():
    for code in _WORDS:
        text = kafka_words(KafkaError(code))
        assert "\n" not in text and ":" in text, text


def test_an_unlisted_code_keeps_the_client_text():
    assert kafka_words(KafkaError(KafkaError.INVALID_CONFIG, "bad thing")) == "bad thing"
