# bench/server/server.py: the Python neighbour of bench's "real server"
# variant: an interpreter (libpython, with its DWARF when the build has
# it) busy a fraction of one CPU. python3 server.py [duty=0.1] [seconds=3600]
import json
import sys
import time


def render(i):
    return json.dumps({"id": i, "items": [str(j) for j in range(20)]})


def handle(i):
    return len(render(i)) + sum(len(s) for s in render(i).split(","))


def main():
    duty = float(sys.argv[1]) if len(sys.argv) > 1 else 0.1
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 3600
    end = time.monotonic() + secs
    i = 0
    while time.monotonic() < end:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.01 * duty:
            handle(i)
            i += 1
        time.sleep(0.01 * (1 - duty))


main()
