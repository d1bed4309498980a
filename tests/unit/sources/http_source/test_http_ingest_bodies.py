"""Property test of the HTTP ingest endpoint's body handling (random, truncated, mutated bodies).

The endpoint never answers 5xx to a bad body, and every well-formed record is either
stored (then, on reading, an event or a dead letter, exactly once) or named in the 400
answer exactly once; a refused batch stores nothing.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire.core.watermarks import WatermarkPolicy
from wire.delivery.wal import WriteAheadLog
from wire.sources.http_source.config import IngestBinding
from wire.sources.http_source.reader import parse_records
from wire.sources.http_source.server import _Gate, create_app
from wire.sources.http_source.source import http_ingest

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.float64())])
LIMIT = 4096

_tmp = Path(tempfile.mkdtemp(prefix="wire-ingest-bodies-"))
_binding = IngestBinding("ingest", http_ingest(port=8080, wal_dir=str(_tmp), schema=SCHEMA,
                                               max_body_bytes=LIMIT), SCHEMA, "t", WatermarkPolicy(0), 100, 1)
_wal = WriteAheadLog(_binding.source.wal_path)
_app = create_app(_Gate(_binding, _wal))


def post(body: bytes, *, chunk: int | None = None) -> tuple[int, dict[str, str], dict]:
    """Call the ASGI app directly (no socket); ``chunk`` streams the body without a length."""
    parts = [body] if chunk is None else [body[i:i + chunk] for i in range(0, len(body), chunk)] or [b""]
    headers = [(b"content-type", b"application/json")]
    headers.append((b"content-length", str(len(body)).encode()) if chunk is None
                   else (b"transfer-encoding", b"chunked"))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/events", "raw_path": b"/events", "query_string": b"",
             "root_path": "", "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    pending = list(parts)
    sent: list[dict] = []

    async def receive() -> dict:
        if not pending:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": pending.pop(0), "more_body": bool(pending)}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(_app(scope, receive, send))
    start = sent[0]
    payload = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, json.loads(payload)


text = st.text(max_size=12)  # any code point, lone surrogates included
value = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                  text, st.lists(st.integers(), max_size=3))
record = st.one_of(
    st.fixed_dictionaries({"t": st.integers(-(2**63), 2**63 - 1)}, optional={"k": text, "v": value}),
    st.dictionaries(text, value, max_size=4),  # any object: fields may not fit the schema
    value,  # not an object
)


def bad_item(item: object) -> bool:
    """What the endpoint refuses in an item: not an object, or a lone surrogate in it."""
    if not isinstance(item, dict):
        return True
    try:
        json.dumps(item, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_stored(first: int, last: int, expected: list[dict] | None) -> None:
    """The stored records read back: each once, as an event or as a dead letter."""
    records = _wal.read(first - 1, last)
    assert [seq for seq, _ in records] == list(range(first, last + 1))
    parsed = parse_records(records, SCHEMA, "t")
    seqs = [records[i][0] for i in parsed.positions]
    seqs += [int(loc.removeprefix("wal:")) for loc, _, _ in parsed.dead]
    assert sorted(seqs) == list(range(first, last + 1))  # exactly once each
    if expected is not None:
        assert [json.loads(body) for _, body in records] == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, max_size=6), st.booleans(), st.sampled_from([None, 1, 7, 64]))
def test_well_formed_bodies_are_stored_or_each_bad_item_is_named_once(items, as_array, chunk):
    doc: object = items if as_array or len(items) != 1 else items[0]
    body = json.dumps(doc, ensure_ascii=bool(len(items) % 2)).encode("utf-8", "surrogatepass")
    before = _wal.max_seq()
    status, headers, answer = post(body, chunk=chunk)
    listed = doc if isinstance(doc, list) else [doc]
    bad = [i for i, item in enumerate(listed) if bad_item(item)]
    if len(body) > LIMIT:
        assert status == 413 and "max_body_bytes" in answer["error"]
    elif bad:
        assert status == 400 and "Retry-After" not in headers
        named = [e["item"] for e in answer["errors"]]
        assert named == (bad if isinstance(doc, list) else [None])  # each bad item once, in order
    else:
        assert status == 202, answer
        assert answer["accepted"] == len(listed)
        if listed:
            check_stored(*answer["seq"], expected=listed)
    if status != 202:
        assert _wal.max_seq() == before  # a refused batch stores nothing


def mutate(body: bytes, data: st.DataObject) -> bytes:
    kind = data.draw(st.sampled_from(["truncate", "flip", "insert", "delete"]))
    at = data.draw(st.integers(0, len(body)))
    if kind == "truncate":
        return body[:at]
    if kind == "delete":
        return body[:at] + body[at + data.draw(st.integers(1, 4)):]
    junk = data.draw(st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\\ud800", b"\\", b'"', b"{", b"]", b",",
                                      b"\x00", b"\xc3", b"NaN", b"1e999", b"\xef\xbb\xbf"]))
    if kind == "insert":
        return body[:at] + junk + body[at:]
    return body[:at] + junk + body[at + 1:]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, max_size=5), st.data(), st.sampled_from([None, 3, 50]))
def test_mutated_and_random_bodies_never_get_a_5xx(items, data, chunk):
    body = json.dumps(items, ensure_ascii=False).encode("utf-8", "surrogatepass")
    for _ in range(data.draw(st.integers(1, 3))):
        body = mutate(body, data)
    if data.draw(st.booleans()):
        body = data.draw(st.binary(max_size=64))
    before = _wal.max_seq()
    status, headers, answer = post(body, chunk=chunk)
    assert status in (202, 400, 413), answer
    assert "Retry-After" not in headers
    if status == 202:
        assert _wal.max_seq() == before + answer["accepted"]
        if answer["accepted"]:
            check_stored(*answer["seq"], expected=None)
    else:
        assert _wal.max_seq() == before and answer["error"]
        if status == 400:
            assert answer["error"].startswith("invalid body")
            items_named = [e["item"] for e in answer["errors"]]
            assert len(items_named) == len(set(items_named))  # each bad item once
