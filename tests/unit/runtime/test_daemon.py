"""The worker daemon's preload: every connector whose extra is installed, never the HTTP servers."""

from __future__ import annotations

from wire.errors import EXTRAS

EXTRA_MODULES = sorted({m for modules in EXTRAS.values() for m in modules})
WATCHED = [*EXTRA_MODULES, "starlette", "wire.sources.file_source", "wire.sinks.file_sinks",
           "wire.sinks.postgres_sink", "wire.sinks.delta_sink", "wire.sources.http_source",
           "wire.sources.http_server", "wire.sources.redis_source", "wire.sinks.redis_sink", "wire.control",
           "wire.runtime.dataplane", "wire.compiler.window_stage"]


def preloaded(run_python, missing: tuple[str, ...] = ()) -> list[str]:
    return run_python(f"""
        from wire.runtime.daemon import preload
        preload()
        print(json.dumps([m for m in {WATCHED!r} if sys.modules.get(m) is not None]))
    """, missing=missing)


def test_preload_loads_the_connectors_but_not_the_http_servers(run_python):
    loaded = preloaded(run_python)
    for module in ("wire.sources.file_source", "wire.sinks.file_sinks", "wire.sinks.postgres_sink",
                   "wire.sinks.delta_sink", "wire.sources.http_source", "wire.sources.redis_source",
                   "wire.sinks.redis_sink", "wire.runtime.dataplane", "wire.compiler.window_stage", "psycopg",
                   "deltalake"):
        assert module in loaded
    for module in ("fastapi", "uvicorn", "starlette", "prometheus_client", "wire.control",
                   "wire.sources.http_server"):
        assert module not in loaded


def test_preload_succeeds_without_any_extra(run_python):
    loaded = preloaded(run_python, tuple(EXTRA_MODULES))
    for module in ("wire.sources.file_source", "wire.sinks.file_sinks", "wire.sources.http_source",
                   "wire.sources.redis_source", "wire.runtime.dataplane", "wire.compiler.window_stage"):
        assert module in loaded
    assert "wire.sinks.postgres_sink" not in loaded and "wire.sinks.delta_sink" not in loaded
