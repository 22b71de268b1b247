#!/usr/bin/env python3
"""make_corpus.py: writes the seed inputs of the fuzzing harnesses into tests/fuzz/corpus/ (the
formats each harness reads are described at its top). Run once to make the seeds; libFuzzer's
merged findings (libFuzzer's -merge=1, by hand) may join them there."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = 0x54545332
REQ_HELLO, REQ_SET, REQ_GET, REQ_CLOSE = 1, 2, 3, 4
REP_OK, REP_VALUE, REP_NOTFOUND, REP_ERROR, REP_CHALLENGE = 100, 101, 102, 103, 104


def hdr(t, a, b, magic=MAGIC):
    return struct.pack('>4I', magic, t, a, b)


def write(harness, name, data):
    d = os.path.join(HERE, 'corpus', harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


def chunks(*msgs):
    """store_server's stream: [connection, length, bytes] per chunk (length < 256)."""
    out = b''
    for conn, m in msgs:
        for i in range(0, len(m), 200):
            part = m[i:i + 200]
            out += bytes([conn, len(part)]) + part
    return out


def hello(rank, size, flags=0, job=b'\0' * 16, mac=b'\0' * 32, magic=MAGIC):
    return (hdr(REQ_HELLO, rank, size, magic) + struct.pack('>I', flags) + job + b'\x3c' * 32 +
            mac)


# store_server: [options, pre-authenticated connections, chunks...]
write('store_server', 'set_get_close', bytes([0, 1]) + chunks(
    (0, hdr(REQ_SET, 1, 5) + b'k' + b'value'), (0, hdr(REQ_GET, 1, 0) + b'k'),
    (0, hdr(REQ_GET, 1, 0) + b'x'), (0, hdr(REQ_CLOSE, 0, 0))))
write('store_server', 'two_ranks', bytes([0, 0x13]) + chunks(
    (0, hdr(REQ_SET, 3, 2) + b'a/0' + b'hi'), (1, hdr(REQ_GET, 3, 0) + b'a/0'),
    (1, hello(2, 4)), (0, hdr(REQ_CLOSE, 0, 0)), (1, hdr(REQ_CLOSE, 0, 0))))
write('store_server', 'stranger', bytes([0, 0]) + chunks(
    (0, hello(1, 4)), (1, hello(1, 4, 1, mac=b'\x77' * 32)), (2, hdr(REQ_GET, 1, 0) + b'k'),
    (3, hdr(REQ_SET, 8, 1 << 20)), (0, hello(0, 4, magic=0))))
write('store_server', 'remote_host_job', bytes([1, 0]) + chunks(
    (0, hello(3, 4)), (0, hdr(REQ_SET, 2, 1) + b'kk' + b'v'), (0, hdr(REQ_GET, 2, 0) + b'kk'),
    (1, hello(3, 4)), (2, hello(2, 5))))
# a second rank 0 (opt bit 5; connection 0 pre-authenticated with TUTTI__WIRE_RIVAL) and one
# that claims to be without proof (flags RIVAL only)
write('store_server', 'rival', bytes([0x20, 0x03]) + chunks(
    (1, hdr(REQ_GET, 1, 0) + b'k'), (2, hello(0, 4, 4)), (1, hdr(REQ_CLOSE, 0, 0))))
write('store_server', 'bad_lengths', bytes([0, 1]) + chunks(
    (0, hdr(REQ_SET, 0, 1)), (1, hdr(REQ_GET, 300, 0)), (2, hdr(99, 0, 0)),
    (3, hdr(REQ_SET, 1, (1 << 20) + 1))))


def reply(t, body=b'', a=0):
    return hdr(t, a, len(body)) + body


# store_client: [1: real handshake first | 0: raw, then the server's bytes]
write('store_client', 'put_get', b'\x01' + reply(REP_OK) + reply(REP_VALUE, b'hello, world') +
      reply(REP_NOTFOUND))
write('store_client', 'errors', b'\x01' + reply(REP_OK) + reply(REP_ERROR, b'no\x01way\xff'))
write('store_client', 'long_value', b'\x01' + reply(REP_OK) + reply(REP_VALUE, b'v' * 5000))
write('store_client', 'raw_challenge', b'\x00' + reply(REP_CHALLENGE, b'\x11' * 32, 1) +
      reply(REP_OK, b'\x42' * 32))
write('store_client', 'raw_refusal', b'\x00' + reply(REP_CHALLENGE, b'\x11' * 32, 1) +
      reply(REP_ERROR, b'authentication failed'))
write('store_client', 'not_a_store', b'\x00HTTP/1.1 400 Bad Request\r\n\r\n')
write('store_client', 'host_file_store', b'\x00' + reply(REP_CHALLENGE, b'\x11' * 32, 2))

# env: [which parser, text]
for i, (which, text) in enumerate([
        (0, b'4'), (0, b'17'), (0, b'-3'), (0, b'9999999999999999999999'), (0, b'3x'),
        (1, b'300'), (1, b'1e-300'), (1, b'nan'), (1, b'inf'), (1, b'0.5'), (1, b'1e-320'),
        (2, b'64K'), (2, b'16MB'), (2, b'18446744073709551615'), (2, b'1G'), (2, b'-1'),
        (3, b'auto'), (3, b'none'), (3 | 0x10, b'0,1'), (3, b'3-1'), (3, b'1,,2'), (3, b'0-1023'),
        (4, b'1 4'), (4, b'5 2'), (4, b'x y'), (4, b'0 1048577'),
        (5 | 0x10, b'short'), (5 | 0x10, b'a-token-long-enough-for-a-job'), (5, b'12345'),
        (5 | 0x20, b'tooshort'),
        (6, b'ring'), (7 | 0x10, b'tree:0-16384;ring:16385-max'), (8, b'direct:0-64K;ring:64K-max'),
        (6, b'ring:10-5'), (6, b'nosuch'), (7, b';;'), (8 | 0x30, b'dissemination'),
]):
    write('env', 'seed%02d' % i, bytes([which]) + text)


def sz(kind, value):
    """layout: 9 bytes per number: a kind byte (0 small, 1 near SIZE_MAX, 2 power of two, 3
    raw) and 8 bytes."""
    return bytes([kind]) + struct.pack('<Q', value)


# layout: [ranks - 1, esize and flags, (count, displacement, other count) per rank]
write('layout', 'packed4', bytes([3, 2 | 4]) + b''.join(sz(0, c) + sz(0, 0) + sz(0, c)
                                                       for c in (1, 2, 3, 4)))
write('layout', 'displs2', bytes([1, 1]) + sz(0, 5) + sz(0, 10) + sz(0, 5) + sz(0, 3) +
      sz(0, 0) + sz(0, 4))
write('layout', 'overflow', bytes([1, 3]) + sz(1, 0) + sz(0, 1) + sz(0, 0) + sz(0, 1) +
      sz(1, 1) + sz(0, 1))
write('layout', 'huge_span', bytes([0, 3 | 8]) + sz(2, 61) + sz(0, 0) + sz(2, 61))
write('layout', 'zero_counts', bytes([7, 0]) + b''.join(sz(0, 0) + sz(3, 0xffff_ffff_ffff)
                                                       + sz(0, 0) for _ in range(8)))
