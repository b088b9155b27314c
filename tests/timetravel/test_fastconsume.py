"""`consume --format raw` read without typer (`chronolog.cli.fastconsume`): exactly the plain command lines it
understands; everything else goes to typer, whose help and errors stay the only ones."""

from __future__ import annotations

from chronolog.cli.fastconsume import parse


def test_plain_raw_command_lines_are_read_here():
    got = parse(["consume", "logs", "--from", "2h ago", "--to=1h ago", "--format", "raw", "-b", "h:1",
                 "--partitions", "0,2", "--isolation-level", "read_uncommitted", "--max-messages", "5"])
    assert got == {"topic": "logs", "from_": "2h ago", "to": "1h ago", "bootstrap": "h:1", "partitions": [0, 2],
                   "isolation": "read_uncommitted", "max_messages": 5}
    assert parse(["consume", "logs", "--format=raw", "--from", "-90m"]) == {
        "topic": "logs", "from_": "-90m", "to": None, "bootstrap": "127.0.0.1:9092", "partitions": None,
        "isolation": "read_committed", "max_messages": None}


def test_everything_else_goes_to_typer():
    base = ["consume", "logs", "--from", "1h ago"]
    for argv in (base,  # the text format
                 [*base, "--format", "json"], [*base, "--format", "raw", "--group", "g"],
                 [*base, "--format", "raw", "--follow"], [*base, "--format", "raw", "-X", "a=b"],
                 [*base, "--format", "raw", "--data-dir", "d"], [*base, "--format", "raw", "--help"],
                 [*base, "--format", "raw", "--max-messages", "0"], [*base, "--format", "raw", "--partitions", "x"],
                 [*base, "--format", "raw", "--isolation-level", "nope"], [*base, "--format", "raw", "--from", "2"],
                 [*base, "--format"], ["consume", "--format", "raw", "logs", "--from", "1h ago"],
                 ["consume", "logs", "--format", "raw"], ["offsets", "logs", "--time", "now"], ["consume"]):
        assert parse(argv) is None, argv


def test_errors_on_the_fast_path_are_one_line():
    from tests.brokerproc import free_port
    from tests.clirun import assert_one_line_error, chronolog

    dead = f"127.0.0.1:{free_port()}"
    assert_one_line_error(chronolog("consume", "t", "--from", "2024-01-01", "--format", "raw", "-b", dead),
                          "is the broker running?")
    assert_one_line_error(chronolog("consume", "t", "--from", "yesterday-ish", "--format", "raw", "-b", dead),
                          "yesterday-ish")
    assert_one_line_error(chronolog("consume", "t", "--from", "2024-01-02", "--to", "2024-01-01", "--format",
                                    "raw", "-b", dead), "--to must be after --from")


def test_values_joined_in_c_as_in_python():
    """`_columns.join_values` and its Python twin write the same bytes; offsets that do not fit the data
    leave it to the twin (None)."""
    import random
    from array import array

    from chronolog.cli.fastconsume import py_value_lines, value_lines
    from chronolog.native import load_native

    join = load_native("chronolog.records._columns", "join_values")
    rng = random.Random(39)
    for _ in range(200):
        items = [rng.randbytes(rng.choice([0, 1, 7, 300])) for _ in range(rng.randint(0, 40))]
        ends = array("i", [0])
        for item in items:
            ends.append(ends[-1] + len(item))
        cols = (None, ends.tobytes(), b"".join(items), 0)  # the decoder's buffers are bytes
        n = rng.randint(0, len(items))
        delim = rng.choice([b"\n", b"", b"\r\n"])
        want = b"".join(item + delim for item in items[:n])
        assert py_value_lines(cols, n, delim) == want
        assert value_lines(cols, n, delim) == want
        if join is not None:
            assert join(ends, cols[2], n, delim) == want
    if join is not None:
        assert join(array("i", [0, 5]), b"abc", 1, b"\n") is None  # an end past the data
        assert join(array("i", [0, 2, 1]), b"abc", 2, b"\n") is None  # ends going back
        assert join(array("i", [0]), b"abc", 1, b"\n") is None  # fewer offsets than rows
