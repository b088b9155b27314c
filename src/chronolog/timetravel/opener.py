"""A source from what a user names: a data dir as a local path or a URI, or a broker. Kept apart from the
sources themselves so `timetravel.remote` (a data dir behind a URI, built on `DataDirSource`) sits above
`timetravel.sources` without the sources importing it back."""

from __future__ import annotations

from pathlib import Path

from chronolog.timetravel.sources import BrokerSource, DataDirSource


def open_data_dir(path: Path | str) -> DataDirSource:
    """A data dir given as a local path or as a URI (`file://`, `s3://`, `gs://`, `hdfs://` ... see
    `timetravel.remote`); local paths keep the plain file path."""
    if isinstance(path, str) and "://" in path:
        from chronolog.timetravel.remote import RemoteDataDirSource
        return RemoteDataDirSource(path)
    return DataDirSource(path)


def open_source(bootstrap: str | None, data_dir: Path | str | None) -> DataDirSource | BrokerSource:
    """The data dir when one is given, else the broker at `bootstrap` (127.0.0.1:9092 by default)."""
    if data_dir is not None:
        return open_data_dir(data_dir)
    return BrokerSource(bootstrap or "127.0.0.1:9092")
