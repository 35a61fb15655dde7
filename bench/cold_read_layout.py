"""Cold reads of the same bytes laid out two ways: N processes each reading its contiguous 1/N of
one file, against N processes each reading a file of its own (DCP's layout), in 16 MiB reads, the
page cache dropped before each (needs root), the two alternating; medians in seconds.

Usage: python3 bench/cold_read_layout.py ROUNDS [DIR]   (writes 2 GiB under DIR, /tmp/rawexp)

A question the 4-rank cold loads against DCP raised (bench/results/2026-11-29-load-vs-dcp.md)."""
import multiprocessing as mp
import os
import sys
import time

N = 4
SIZE = 1 << 30
CHUNK = 16 << 20


def write(path, size):
    block = os.urandom(CHUNK)
    with open(path, "wb") as f:
        for _ in range(size // CHUNK):
            f.write(block)


def reader(path, begin, n, barrier):
    barrier.wait()
    buf = memoryview(bytearray(CHUNK))
    fd = os.open(path, os.O_RDONLY)
    os.lseek(fd, begin, os.SEEK_SET)
    left = n
    while left > 0:
        k = os.readv(fd, [buf[:min(left, CHUNK)]])
        if not k:
            break
        left -= k
    os.close(fd)


def cold_read(directory, layout):
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")
    barrier = mp.Barrier(N + 1)
    procs = []
    for r in range(N):
        if layout == "one file":
            args = (f"{directory}/one", r * SIZE // N, SIZE // N)
        else:
            args = (f"{directory}/part{r}", 0, SIZE // N)
        procs.append(mp.Process(target=reader, args=args + (barrier,)))
        procs[-1].start()
    barrier.wait()
    t0 = time.perf_counter()
    for p in procs:
        p.join()
    return time.perf_counter() - t0


def main():
    rounds = int(sys.argv[1])
    directory = sys.argv[2] if len(sys.argv) > 2 else "/tmp/rawexp"
    os.makedirs(directory, exist_ok=True)
    write(f"{directory}/one", SIZE)
    for r in range(N):
        write(f"{directory}/part{r}", SIZE // N)
    times = {"one file": [], "a file per reader": []}
    for i in range(rounds):
        order = list(times) if i % 2 == 0 else list(reversed(times))
        for layout in order:
            times[layout].append(cold_read(directory, layout))
    for layout, t in times.items():
        t.sort()
        print(f"{layout}: median {t[len(t) // 2]:.3f} s over {len(t)} "
              f"({' '.join(f'{x:.3f}' for x in t)})")


if __name__ == "__main__":
    main()
