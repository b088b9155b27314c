"""KIP-848 subscriptions by regular expression, resolved by the broker, on chronolog and Kafka 4.4: the
same topics assigned. Kafka compiles the regex with RE2/J and matches every topic of its metadata,
internal ones included (`.*` is assigned `__consumer_offsets`), and topics created after the subscription
(its resolver refreshes at most every 10 s, GroupMetadataManager.REGEX_BATCH_REFRESH_MIN_INTERVAL_MS)."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.differential.groups_wire import Member848, call, coordinator_ready, heartbeat

INVALID_REGULAR_EXPRESSION = 128


def _names(side) -> dict[str, str]:
    answer = call(side, 3, 12, topics=None, allow_auto_topic_creation=False)
    return {t["name"]: t["topic_id"] for t in answer["topics"]}


def _assigned_until(side, member: Member848, done, timeout: float = 40) -> dict[str, list[int]]:
    """Heartbeat until `done(assigned names)`: the member's topics (by name) then."""
    deadline = time.monotonic() + timeout
    while True:
        member.beat()
        owned = member.owned_names(_names(side))
        if done(owned) or time.monotonic() > deadline:
            return owned
        time.sleep(0.1)


def internal_topics_by_regex(side, regex: str) -> dict:
    topic = side.create_topic(partitions=1, prefix="rxi")
    group = f"grx-{uuid.uuid4().hex[:10]}"
    coordinator_ready(side, group)
    member = Member848(side, group, regex=regex)
    owned = _assigned_until(side, member, lambda o: "__consumer_offsets" in o and
                            (topic in o or regex != ".*"))
    out = {"__consumer_offsets": sorted(owned.get("__consumer_offsets", [])), "own topic": topic in owned}
    member.leave()
    return out


@pytest.mark.parametrize("regex", [".*", "__consumer_.*", "__.*offsets"])
def test_a_regex_matches_internal_topics(both, regex):
    """chronolog left out every topic starting with `__`."""
    seen = both.same(internal_topics_by_regex, regex)
    assert len(seen["__consumer_offsets"]) == 50


def topics_created_later(side) -> dict:
    prefix = f"rxl-{uuid.uuid4().hex[:8]}"
    before = side.create_topic(f"{prefix}-a", partitions=2)
    side.create_topic(f"other-{prefix}", partitions=1)
    group = f"grl-{uuid.uuid4().hex[:10]}"
    coordinator_ready(side, group)
    member = Member848(side, group, regex=f"{prefix}-.*")
    first = _assigned_until(side, member, lambda o: before in o and len(o[before]) == 2)
    later = side.create_topic(f"{prefix}-b", partitions=3)
    then = _assigned_until(side, member, lambda o: later in o and len(o[later]) == 3)
    member.leave()
    return {"first": {k.replace(prefix, "P"): v for k, v in first.items()},
            "then": {k.replace(prefix, "P"): v for k, v in then.items()}}


def test_a_regex_takes_topics_created_after_the_subscription(both):
    seen = both.same(topics_created_later)
    assert seen["then"] == {"P-a": [0, 1], "P-b": [0, 1, 2]}


def regex_syntax(side, regex: str) -> int:
    group = f"grs-{uuid.uuid4().hex[:10]}"
    coordinator_ready(side, group)
    answer = heartbeat(side, group, member_id=str(uuid.uuid4()), regex=regex, topics=[])
    if answer["error_code"] == 0:
        heartbeat(side, group, member_id=answer["member_id"], epoch=-1)
    return answer["error_code"]


# RE2/J's syntax, not Python's: lookaround, backreferences and possessive quantifiers are invalid;
# Unicode classes, POSIX classes and \z are valid.
@pytest.mark.parametrize("regex", ["(?=abc).*", r"(a)\1", "a++", "[unclosed", r"\pL+", "[[:alpha:]]+", r"abc\z",
                                   "(?i)ABC.*", "(?P<name>x)y"])
def test_regex_syntax_is_re2(both, regex):
    code = both.same(regex_syntax, regex)
    assert code in (0, INVALID_REGULAR_EXPRESSION)
