"""tony_py.hdfs's reads (SequentialReads): hdfs-native's own read(n) is one DataNode request per
call, so reads that follow on from each other share one stream, and a read elsewhere (after a
seek) opens a new one. Checked against a stand-in for hdfs-native's Rust
reader that serves a file from memory and counts the requests made of it: what reads reach
HDFS is the integration tests' (tests/integration/test_hdfs_from_tasks.py) and the bench's."""

from __future__ import annotations

import os

import pytest

from tony_py.hdfs import SequentialReads

pytestmark = pytest.mark.unit

PACKET = 64 << 10  # what hdfs-native's stream yields at a time


class Inner:
    """hdfs-native's RawFileReader, over bytes in memory: a position, read (one request), and
    read_range_stream (one request, then packets as they are asked for)."""

    def __init__(self, data: bytes, fail_after_packets: int | None = None):
        self.data, self.pos, self.requests = data, 0, []
        self.fail_after_packets = fail_after_packets

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int) -> None:
        self.pos = pos

    def file_length(self) -> int:
        return len(self.data)

    def read(self, n: int) -> bytes:
        self.requests.append(("read", self.pos, n))
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out

    def read_range_stream(self, offset: int, length: int):
        self.requests.append(("stream", offset, length))
        for i, at in enumerate(range(offset, offset + length, PACKET)):
            if self.fail_after_packets is not None and i == self.fail_after_packets:
                self.fail_after_packets = None  # the next stream works
                raise RuntimeError("Connection reset by peer")
            yield self.data[at:min(at + PACKET, offset + length)]


class Reader(SequentialReads):
    def __init__(self, inner: Inner):
        self.inner = inner


DATA = os.urandom(10 * PACKET + 123)


def test_small_reads_that_follow_on_share_one_stream_and_give_every_byte():
    inner = Inner(DATA)
    reader = Reader(inner)
    got = b"".join(iter(lambda: reader.read(1000), b""))
    assert got == DATA and inner.requests == [("stream", 0, len(DATA))]
    assert inner.pos == len(DATA) and reader.read(10) == b""


def test_a_seek_elsewhere_drops_the_stream_and_a_seek_to_where_it_is_keeps_it():
    inner = Inner(DATA)
    reader = Reader(inner)
    assert reader.read(100) == DATA[:100]
    inner.seek(100)  # where the stream is: no new request
    assert reader.read(100) == DATA[100:200]
    inner.seek(5000)
    assert reader.read(100) == DATA[5000:5100]
    inner.seek(0)
    assert reader.read() == DATA  # read() reads the rest
    assert [r[:2] for r in inner.requests] == [("stream", 0), ("stream", 5000), ("stream", 0)]


def test_a_large_read_is_one_stream_and_reads_on_from_it_continue_it():
    data = os.urandom(40 * PACKET + 10)
    inner = Inner(data)
    reader = Reader(inner)
    inner.seek(3)
    assert reader.read(20 * PACKET) == data[3:3 + 20 * PACKET]
    assert reader.read(20 * PACKET) == data[3 + 20 * PACKET:3 + 40 * PACKET]
    assert reader.read(20 * PACKET) == data[3 + 40 * PACKET:]
    assert inner.requests == [("stream", 3, len(data) - 3)] and inner.tell() == len(data)


def test_readinto_fills_the_buffer_and_says_how_much_at_the_end():
    inner = Inner(DATA)
    reader = Reader(inner)
    parts = []
    for size in (100, 3 * PACKET, 3 * PACKET + 7):  # across the packets, then on to the end
        buf = bytearray(size)
        while n := reader.readinto(buf):
            parts.append(bytes(buf[:n]))
            if sum(map(len, parts)) >= 5 * PACKET and size != 3 * PACKET + 7:
                break
    assert b"".join(parts) == DATA and inner.requests == [("stream", 0, len(DATA))]
    assert reader.readinto(bytearray(10)) == 0


def test_a_stream_that_breaks_is_opened_again_from_where_the_reads_are():
    inner = Inner(DATA, fail_after_packets=3)
    reader = Reader(inner)
    assert reader.read(PACKET) == DATA[:PACKET]
    got = reader.read(len(DATA))
    assert got == DATA[PACKET:]
    assert [r[:2] for r in inner.requests] == [("stream", 0), ("stream", PACKET)]


# ---- writes: what hdfs-native is handed --------------------------------------------------------
def test_bytes_go_to_hdfs_native_as_they_are_and_other_buffers_as_bounded_bytes_copies():
    from tony_py import hdfs

    data = os.urandom(2 * hdfs._WRITE_COPY + 5)
    assert [p is data for p in hdfs.bytes_pieces(data)] == [True]  # no copy of bytes
    for buf in (memoryview(data), bytearray(data), memoryview(data).cast("B", (len(data),))):
        pieces = list(hdfs.bytes_pieces(buf))
        assert all(type(p) is bytes for p in pieces)
        assert [len(p) for p in pieces] == [hdfs._WRITE_COPY, hdfs._WRITE_COPY, 5]
        assert b"".join(pieces) == data
    ints = memoryview(bytearray(data[:64])).cast("I")  # a typed buffer (a tensor's): its bytes
    assert b"".join(hdfs.bytes_pieces(ints)) == data[:64]
    assert list(hdfs.bytes_pieces(b"")) == [b""] and list(hdfs.bytes_pieces(bytearray())) == []
