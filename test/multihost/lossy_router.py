#!/usr/bin/env python3
"""A user-space link with delay and loss, for the multi-host test bed (this kernel has no netem).

Creates two TUN devices (no packet info header: each read or write is one IP packet) named by the
first two arguments, in the network namespace it runs in; the test then moves one of them into a
host's namespace. Every packet read from one device is written to the other after DELAY_MS
milliseconds (a time-ordered queue), unless a seeded random draw drops it (LOSS, a fraction).

Usage: lossy_router.py DEV_A DEV_B DELAY_MS LOSS SEED
Prints "READY" once both devices exist; on SIGTERM or SIGINT prints one JSON line with its
counters ({"forwarded": n, "dropped": n (by the draw), "unsent": n (a device refused it),
"delayMs": d, "maxQueue": n, "minHeldMs": the shortest time a forwarded packet was held}) and exits 0.
"""

import fcntl
import heapq
import json
import os
import random
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def main() -> None:
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    dev_a, dev_b = sys.argv[1], sys.argv[2]
    delay = float(sys.argv[3]) / 1000.0
    loss = float(sys.argv[4])
    rng = random.Random(int(sys.argv[5]))
    fa, fb = open_tun(dev_a), open_tun(dev_b)
    peer = {fa: fb, fb: fa}
    counts = {"forwarded": 0, "dropped": 0, "delayMs": delay * 1000.0, "maxQueue": 0, "unsent": 0, "minHeldMs": None}
    queue: list = []  # (due, seq, read at, out_fd, packet)
    seq = 0
    stop = []

    def on_signal(_sig, _frame):
        stop.append(True)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print("READY", flush=True)
    while not stop:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, came, out, pkt = heapq.heappop(queue)
            try:
                os.write(out, pkt)
                counts["forwarded"] += 1
                held = (time.monotonic() - came) * 1000.0
                if counts["minHeldMs"] is None or held < counts["minHeldMs"]:
                    counts["minHeldMs"] = held
            except OSError:
                # the device is down (not yet configured, or its namespace is going): the packet is lost
                counts["unsent"] += 1
        timeout = max(0.0, queue[0][0] - now) if queue else 0.5
        try:
            ready, _, _ = select.select([fa, fb], [], [], timeout)
        except InterruptedError:
            continue
        for fd in ready:
            while True:
                try:
                    pkt = os.read(fd, 65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break
                if rng.random() < loss:
                    counts["dropped"] += 1
                    continue
                seq += 1
                came = time.monotonic()
                heapq.heappush(queue, (came + delay, seq, came, peer[fd], pkt))
                counts["maxQueue"] = max(counts["maxQueue"], len(queue))
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
