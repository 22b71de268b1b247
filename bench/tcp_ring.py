#!/usr/bin/env python3
"""tcp_ring.py: the most a ring of plain TCP streams moves between the hosts of
scripts/cluster.sh, with nothing else to do: each host sends MiB mebibytes to the next and
receives as many from the previous at once, and prints its rate each way. A ring allreduce's
busbw cannot exceed it on the same hosts; docs/multinode.md compares the two.

    scripts/cluster.sh up 4 --rate 10gbit
    scripts/cluster.sh run -- python3 bench/tcp_ring.py 4 2048
    scripts/cluster.sh down

Usage: tcp_ring.py HOSTS MiB. Each host times from its own start, and the hosts start up to
~0.3 s apart: move a few seconds' worth (2048 MiB at 4 Gbit/s) or the rate reads low. A host's index comes from its address on eth0 (10.77.0.i+1, as
cluster.sh gives them). Standard library only.
"""
import socket
import subprocess
import sys
import threading
import time

PORT = 41000


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    n, mib = int(argv[0]), int(argv[1])
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "eth0"], capture_output=True,
                         text=True).stdout.split()
    if len(out) < 4:
        sys.exit("tcp_ring.py: no IPv4 address on eth0: run it on cluster.sh's hosts")
    ip = out[3].split("/")[0]
    me = int(ip.split(".")[-1]) - 1
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((ip, PORT))
    srv.listen(1)
    srv.settimeout(30)
    peer = "10.77.0.%d" % ((me + 1) % n + 1)
    deadline = time.time() + 30
    while True:
        nxt = socket.socket()
        try:
            nxt.connect((peer, PORT))
            break
        except OSError:
            nxt.close()
            if time.time() > deadline:
                sys.exit("tcp_ring.py: host %d cannot reach %s" % (me, peer))
            time.sleep(0.05)
    prv, _ = srv.accept()
    total = mib << 20
    block = memoryview(bytearray(1 << 20))

    def send():
        left = total
        while left > 0:
            left -= nxt.send(block[:min(len(block), left)])

    def recv():
        got, b = 0, bytearray(1 << 20)
        while got < total:
            k = prv.recv_into(b)
            if k == 0:
                raise SystemExit("tcp_ring.py: host %d: the previous host closed early" % me)
            got += k

    t0 = time.time()
    threads = [threading.Thread(target=send), threading.Thread(target=recv)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.time() - t0
    print("host %d: %.2f Gbit/s each way (%d MiB in %.2f s)" % (me, total * 8 / dt / 1e9, mib, dt),
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
