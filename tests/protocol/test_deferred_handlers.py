"""Handler modules a broker imports on the first request for one of their APIs (`registry.defer`): their
versions and features are advertised before, match what the modules register, and the first request loads
them before its frame is parsed."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

from chronolog.protocol.registry import FEATURES, HANDLERS
from chronolog.server.broker import DEFERRED_HANDLERS, _load_handlers


def test_the_deferred_versions_and_features_are_the_modules_own():
    _load_handlers()
    for module, (versions, features) in DEFERRED_HANDLERS.items():
        importlib.import_module(module)
        for key, (lo, hi) in versions.items():
            handler = HANDLERS[key]
            assert (handler.min_version, handler.max_version, handler.module) == (lo, hi, None), (module, key)
            assert handler.fn.__module__ == module
        for name, feature in features.items():
            assert FEATURES[name] == feature


def test_a_broker_start_imports_none_of_them_until_asked():
    code = textwrap.dedent("""
        import sys
        from chronolog.server.broker import DEFERRED_HANDLERS, _load_handlers
        from chronolog.protocol.registry import FEATURES, HANDLERS
        _load_handlers()
        assert not [m for m in DEFERRED_HANDLERS if m in sys.modules], sorted(sys.modules)
        advertised = dict(HANDLERS.items())
        assert advertised[88].max_version == 1 and advertised[78].max_version == 2 and 38 in advertised
        assert FEATURES["share.version"] == (0, 2, 2) and FEATURES["streams.version"] == (0, 1, 1)
        handler = HANDLERS.get(88)  # as the broker asks, before parsing (the streams schemas load with it)
        assert "chronolog.protocol.streams_groups" in sys.modules and handler.module is None
        assert handler.fn.__module__ == "chronolog.protocol.streams_groups"
        assert "chronolog.protocol.share_groups" not in sys.modules
        from chronolog.protocol import codec
        assert codec.request_schema(88, 1) is not None
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
