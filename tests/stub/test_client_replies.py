"""The RSP client's one-recv reply path (stub/client.py lone_reply, issue 26 #7): a recv that is
exactly one reply packet is taken without the general parser, and gives what the parser gives;
anything else goes to the parser as before. Register reads without a reader thread (the Python
API's client) return what the device holds, one by one and in blocks."""
from hypothesis import given
from hypothesis import strategies as st

from accelstub.stub.client import RspClient, lone_reply
from accelstub.stub.rsp_codec import PacketReader, frame, rle_decode

#: payload bytes a reply can hold unescaped (no '$', '#', '}' or '*' of its own)
PAYLOAD = st.binary(max_size=300).map(lambda b: bytes(c for c in b if c not in b"$#}*%"))


def parsed(data: bytes) -> list[bytes]:
    """The reply packets the general parser finds in ``data``, decoded as the client does."""
    return [rle_decode(e.payload) for e in PacketReader(1 << 20).feed(data) if e.kind == "packet"]


@given(PAYLOAD)
def test_one_whole_packet_gives_what_the_parser_gives(payload):
    data = frame(payload)
    if payload[:1] == b"O":  # console output: the parser's path (the client keeps it apart)
        assert lone_reply(data) is None
    else:
        assert [lone_reply(data)] == parsed(data)


def test_run_length_encoded_reply_is_expanded():
    assert lone_reply(frame(b"0* ")) == b"0000"  # ' ' = 32: three more


@given(PAYLOAD, PAYLOAD)
def test_anything_but_one_whole_packet_is_left_to_the_parser(a, b):
    whole = frame(a)
    assert lone_reply(whole + frame(b)) is None  # two packets
    assert lone_reply(whole[:-1]) is None  # a part
    assert lone_reply(frame(a, notification=True)) is None  # %Stop...
    assert lone_reply(b"+" + whole) is None  # an ack first
    bad = whole[:-2] + b"%02x" % ((int(whole[-2:], 16) + 1) & 0xFF)
    assert lone_reply(bad) is None  # a wrong checksum
    assert lone_reply(whole[:-2] + b"zz") is None  # a checksum that is not hex


def test_register_reads_without_a_reader_thread_give_the_device_values(stub):
    """The Python API's client (reader_thread=False): each read, one by one and in a block,
    equals the device's own register value, also after the value changed."""
    dev = stub.targets[0].device
    with RspClient(port=stub.gdb[0].port, reader_thread=False) as c:
        assert c._noack  # the one-recv path is the no-ack client's
        names = ["pc"] + [r.name for r in dev.description.registers
                          if r.name in c.registers()][:24]
        assert len(names) == 25
        for value in (0x123, 0x056):  # RCNT is 10 bits wide
            expected = [dev.read_core("pc")] + [dev.read_register(n) for n in names[1:]]
            assert [c.read_register(n) for n in names] == expected
            assert c.read_registers(names) == expected
            c.write_register("CNNx16_0_L0_RCNT", value)
            assert dev.read_register("CNNx16_0_L0_RCNT") == value
            assert c.read_register("CNNx16_0_L0_RCNT") == value
