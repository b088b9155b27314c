"""franz-go's own integration suite (its `pkg/kgo` tests), run unmodified against a broker we name.

The suite is a Go client's: it reads its broker from `KGO_SEEDS` and its load from `KGO_TEST_RECORDS`, and
creates its own topics and groups. Nothing of it is in this repository: `build()` fetches the module through
the Go module proxy (or the local module cache) into a scratch folder and compiles the test binary once;
`run()` runs a selection of it against one broker and returns each test's outcome from `go test -json`'s
events. `python -m tests.compat.franz_go kafka chronolog` starts each broker in turn, runs the suite against
it and prints the counts, and the tests that pass on the first and not on the others.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

MODULE = "github.com/twmb/franz-go"
VERSION = "v1.22.3"
PACKAGE = "./pkg/kgo/"


class Unavailable(Exception):
    """Go or the module is not to be had here; the message is the one line a skip shows."""


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        raise Unavailable("go is not installed")
    return go


def cache_dir(repo: Path, fallback: Path) -> Path:
    """Where the built suite is kept between runs: the checkout's var/ (as Kafka's jars are), else `fallback`."""
    d = repo / "var" / f"franz-go-{VERSION}"
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return fallback
    return d if os.access(d, os.W_OK) else fallback


def build(workdir: Path, timeout: float = 1200) -> Path:
    """The compiled `pkg/kgo` test binary of franz-go `VERSION`, built in `workdir` unless it is there
    already. Go's build cache keeps the compiled packages, so only the first build on a machine takes
    minutes. A lock file keeps pytest-xdist workers from building into one folder at once."""
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(workdir, timeout)


def _build(workdir: Path, timeout: float) -> Path:
    # Inside the package folder: the tests run from there (as `go test` runs them) and read its sources.
    src = workdir / "franz-go"
    binary = src / "pkg" / "kgo" / "kgo.test"
    if binary.exists():
        return binary
    go = _go()
    env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false", "GOTOOLCHAIN": "local"}
    try:
        dl = subprocess.run([go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], capture_output=True,
                            text=True, timeout=300, env=env, cwd=workdir)
    except subprocess.TimeoutExpired as exc:
        raise Unavailable(f"go mod download {MODULE}@{VERSION} timed out (no module proxy?)") from exc
    info = json.loads(dl.stdout or "{}") if dl.stdout.strip().startswith("{") else {}
    if dl.returncode != 0 or not info.get("Dir"):
        why = (info.get("Error") or dl.stderr.strip().splitlines()[-1:] or ["unknown error"])
        raise Unavailable(f"go mod download {MODULE}@{VERSION} failed: {why if isinstance(why, str) else why[0]}")
    # The module cache is read-only, and `go test` writes go.sum beside the module's go.mod: a copy.
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(info["Dir"], src)
    for p in [src, *src.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    partial = binary.with_suffix(".partial")
    try:
        done = subprocess.run([go, "test", "-c", "-o", str(partial), PACKAGE], cwd=src, capture_output=True,
                              text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        raise Unavailable("compiling franz-go's tests timed out") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
        if "dial tcp" in tail[0] or "proxy" in tail[0]:
            raise Unavailable(f"franz-go's dependencies could not be fetched: {tail[0]}")
        raise RuntimeError(f"go test -c failed: {(done.stderr or done.stdout)[-3000:]}")
    partial.rename(binary)  # only a whole binary is ever found by the next run
    return binary


@dataclass
class Results:
    """Each test's outcome (`pass`, `fail` or `skip`), subtests by their full `Parent/child` names."""

    outcomes: dict[str, str] = field(default_factory=dict)
    output: dict[str, list[str]] = field(default_factory=dict)
    exit_code: int | None = None
    raw: str = ""

    @property
    def top(self) -> dict[str, str]:
        return {name: o for name, o in self.outcomes.items() if "/" not in name}

    def counts(self) -> dict[str, int]:
        c = Counter(self.top.values())
        return {"passed": c["pass"], "failed": c["fail"], "skipped": c["skip"]}

    def passed(self) -> set[str]:
        return {name for name, o in self.top.items() if o == "pass"}

    def log(self, name: str, lines: int = 40) -> str:
        """The last lines a test printed, for an assertion message."""
        return "".join(self.output.get(name, [])[-lines:])


def parse(events: str) -> Results:
    """`go test -json` (test2json) events to outcomes. A test still running when the binary died (a panic or
    the -timeout) has no final event: it counts as failed."""
    res = Results()
    started: list[str] = []
    for line in events.splitlines():
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        name, action = ev.get("Test"), ev.get("Action")
        if not name:
            continue
        if action == "run":
            started.append(name)
        elif action == "output":
            res.output.setdefault(name, []).append(ev.get("Output", ""))
        elif action in ("pass", "fail", "skip"):
            res.outcomes[name] = action
    for name in started:
        res.outcomes.setdefault(name, "fail")
    return res


def run(binary: Path, seeds: str, *, run_regex: str | None = None, skip_regex: str | None = None,
        records: int | None = None, parallel: int | None = None, timeout: float = 3600,
        env: dict[str, str] | None = None) -> Results:
    """Run the suite (or the tests `run_regex` selects) against `seeds`, one broker: replication factor 1."""
    go = _go()
    test_env = {**os.environ, "KGO_SEEDS": seeds, "KGO_TEST_RF": "1", "KGO_LOG_LEVEL": "none",
                **({"KGO_TEST_RECORDS": str(records)} if records else {}), **(env or {})}
    # The binary's own -test.timeout panics with every running test's stack: a bound only for a hung run.
    args = [str(binary), "-test.v=test2json", "-test.count=1", f"-test.timeout={int(timeout)}s"]
    if run_regex:
        args.append(f"-test.run={run_regex}")
    if skip_regex:
        args.append(f"-test.skip={skip_regex}")
    if parallel:
        args.append(f"-test.parallel={parallel}")
    test2json = subprocess.Popen([go, "tool", "test2json", "-t", "-p", "kgo", *args], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, env=test_env, cwd=binary.parent)
    try:
        out, _ = test2json.communicate(timeout=timeout + 120)
    except subprocess.TimeoutExpired:
        test2json.kill()
        out, _ = test2json.communicate()
    res = parse(out)
    res.exit_code = test2json.returncode
    res.raw = out
    return res


def _start(target: str, base: Path, stack: contextlib.ExitStack) -> str:
    """A seeds string for `target`: a chronolog or Kafka 4.4 broker started here (stopped by `stack`), or
    HOST:PORT as given."""
    if target == "chronolog":
        from tests.brokerproc import BrokerProcess

        (base / "chronolog").mkdir()
        broker = BrokerProcess(base / "chronolog" / "data", {"group.initial.rebalance.delay.ms": "0"}).start()
        stack.callback(broker.stop)
        return broker.bootstrap
    if target == "kafka":
        from chronolog.testing.kafka import KafkaBroker, kafka_available

        if why := kafka_available():
            raise Unavailable(f"Apache Kafka cannot run here: {why}")
        kafka = KafkaBroker(base=base / "kafka")  # group.initial.rebalance.delay.ms=0 is among its defaults
        kafka.start()
        stack.callback(kafka.stop)
        return kafka.bootstrap
    return target


def main(argv: list[str]) -> int:
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(prog="python -m tests.compat.franz_go", description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", metavar="TARGET",
                    help="chronolog or kafka (a broker started for the run), or HOST:PORT of a running one")
    ap.add_argument("--run", dest="run_regex", help="only the tests this Go regex selects")
    ap.add_argument("--skip", dest="skip_regex", help="not the tests this Go regex selects")
    ap.add_argument("--records", type=int, help="records a produce/consume chain moves (KGO_TEST_RECORDS)")
    ap.add_argument("--parallel", type=int, default=8, help="tests run at once (go test -parallel)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds before a hung run is stopped, its running "
                    "tests failed")
    ap.add_argument("--json", type=Path, help="write every test's outcome per target to this file")
    ap.add_argument("--build", action="store_true", help="only fetch and compile the suite (into var/)")
    a = ap.parse_args(argv)
    repo = Path(__file__).resolve().parents[2]
    base = Path(tempfile.mkdtemp(prefix="franz-go-"))
    try:
        return _main(a, repo, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _main(a, repo: Path, base: Path) -> int:
    try:
        binary = build(cache_dir(repo, base))
    except Unavailable as exc:
        print(f"franz-go's suite cannot run here: {exc}", file=sys.stderr)
        return 1
    if a.build:
        return 0
    results: dict[str, Results] = {}
    for target in a.targets:
        with contextlib.ExitStack() as stack:
            seeds = _start(target, base, stack)
            results[target] = run(binary, seeds, run_regex=a.run_regex, skip_regex=a.skip_regex,
                                  records=a.records, parallel=a.parallel, timeout=a.timeout)
        res = results[target]
        print(f"{target}: {res.counts()}")
        for name, outcome in sorted(res.top.items()):
            if outcome != "pass":
                print(f"  {outcome:5} {name}")
    if len(results) > 1:
        first, *others = a.targets
        for other in others:
            lost = sorted(results[first].passed() - results[other].passed())
            print(f"pass on {first}, not on {other}: {lost or 'none'}")
    if a.json:
        a.json.write_text(json.dumps({t: r.outcomes for t, r in results.items()}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
