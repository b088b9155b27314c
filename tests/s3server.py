"""moto's S3-compatible server on 127.0.0.1 for the tests that read or write `s3://` through pyarrow: object
keys, implicit directories and ranged GETs instead of a local file system."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_EC2_METADATA_DISABLED": "true"}


@contextmanager
def s3_server(bucket: str, environment: bool = True) -> Iterator[tuple[Any, Any, str]]:
    """A started server with `bucket` and test credentials in the environment (both undone after; not set
    without `environment`, for a test whose URI carries them); yields the server, a boto3 client of it and
    the query that points a pyarrow `s3://` URI at it. Skips the test without moto or boto3."""
    server_mod = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in CREDENTIALS.items() if environment else ():
            mp.setenv(key, value)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                                  aws_access_key_id="testing", aws_secret_access_key="testing")
            client.create_bucket(Bucket=bucket)
            yield server, client, f"?region=us-east-1&endpoint_override=127.0.0.1:{port}&scheme=http"
        finally:
            server.stop()
