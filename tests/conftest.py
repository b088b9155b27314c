"""Fixtures shared by every test package."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO.parent / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real inputs nobody here wrote: loghub syslog, Kafka-written segments, legacy v0 sets."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found beside the repo ({SHARED_DATA})")
    return SHARED_DATA


@pytest.fixture(scope="session")
def kafka_segments_dir(shared_data: Path) -> Path:
    return shared_data / "kafka-segments" / "timeindex_test"
