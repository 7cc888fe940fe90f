"""RSP framing: checksums, escaping, RLE, and the incremental parser (incl. fuzzing)."""
from hypothesis import given, settings
from hypothesis import strategies as st

from accelstub.stub.rsp_codec import PacketReader, checksum, escape, frame, rle_decode, unescape


def test_frame_has_two_digit_checksum():
    assert frame(b"OK") == b"$OK#9a"
    assert frame(b"") == b"$#00"


def test_escape_covers_the_four_special_bytes():
    assert escape(b"#$}*") == b"}\x03}\x04}]}\x0a"
    assert unescape(escape(b"a#b$c}d*e")) == b"a#b$c}d*e"


@given(st.binary(max_size=300))
def test_escape_round_trips_any_binary(data):
    assert unescape(escape(data)) == data
    assert b"#" not in escape(data) and b"$" not in escape(data)


def test_rle_decode_repeats_previous_character():
    # '0* ' : ' ' is 32, so 32-29 = 3 more zeros
    assert rle_decode(b"0* ") == b"0000"


def test_reader_splits_packets_acks_and_interrupts():
    r = PacketReader(100)
    evs = r.feed(b"+$m0,4#fd\x03-$g#67")
    assert [(e.kind, e.payload) for e in evs] == [
        ("ack", b""), ("packet", b"m0,4"), ("interrupt", b""), ("nack", b""), ("packet", b"g")]


def test_reader_waits_for_incomplete_packets():
    r = PacketReader(100)
    assert r.feed(b"$qSupp") == []
    assert r.feed(b"orted#3") == []
    assert [e.kind for e in r.feed(b"7")] == ["packet"]


def test_reader_reports_bad_checksum():
    evs = PacketReader(100).feed(b"$g#00")
    assert evs[0].kind == "bad_checksum"


def test_reader_reports_oversized_packet_once_and_recovers():
    r = PacketReader(8)
    evs = r.feed(b"$" + b"A" * 50)
    evs += r.feed(b"A" * 50 + b"#00$g#67")
    assert [e.kind for e in evs] == ["oversized", "packet"]


def test_interrupt_byte_inside_a_packet_is_data():
    payload = b"X0,1:\x03"
    evs = PacketReader(100).feed(frame(payload))
    assert [(e.kind, e.payload) for e in evs] == [("packet", payload)]


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=40), max_size=10))
def test_reader_never_raises_on_noise(chunks):
    r = PacketReader(64)
    for c in chunks:
        for e in r.feed(c):
            assert e.kind in {"packet", "notification", "interrupt", "ack", "nack",
                              "bad_checksum", "oversized"}
            if e.kind == "packet":
                assert checksum(e.payload) is not None


@settings(max_examples=50)
@given(st.binary(min_size=500, max_size=3000))
def test_checksum_of_large_payloads_is_the_byte_sum_mod_256(data):
    assert checksum(data) == sum(data) % 256
