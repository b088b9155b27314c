"""`python -m chronolog.testing`: a test broker with the fault admin API as a process of its own, for tests
written in another language or run by another tool (a Spark job, a Node or JVM test suite). It prints one
line, `bootstrap=HOST:PORT admin=URL data=DIR`, then serves until SIGTERM or SIGINT and removes its data."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from chronolog.testing.runner import TestBroker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chronolog.testing",
                                     description="a chronolog broker for tests, with the fault admin API")
    parser.add_argument("--port", type=int, default=0, help="Kafka port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--admin-port", type=int, default=0, help="fault admin API port on 127.0.0.1")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="a broker config")
    parser.add_argument("--user", action="append", default=[], metavar="USER:PASSWORD",
                        help="a SASL user (the listener becomes SASL_PLAINTEXT)")
    parser.add_argument("--data-dir", default=None, help="keep the data here (default: a temporary dir, removed)")
    args = parser.parse_args(argv)
    configs, users = {}, {}
    for item, into, sep in [(c, configs, "=") for c in args.config] + [(u, users, ":") for u in args.user]:
        key, found, value = item.partition(sep)
        if not found or not key:
            parser.error(f"{item!r} is not {'KEY=VALUE' if sep == '=' else 'USER:PASSWORD'}")
        into[key.strip()] = value.strip()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    broker = TestBroker(args.data_dir, configs=configs, users=users, admin_api=True, port=args.port,
                        admin_port=args.admin_port)
    try:
        broker.start()
    except Exception as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"bootstrap={broker.bootstrap} admin={broker.admin_url} data={broker.data_dir}", flush=True)
        stop.wait()
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
