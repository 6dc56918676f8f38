#!/usr/bin/python3
"""What a buffered write costs depending on how long ago the memory it takes was freed.

    /usr/bin/python3 tools/bench_page_cache.py [--dir runs/page_cache] [--gb 1.36]

Writes files of --gb in 8 MiB writes and fsyncs each, deleting one and waiting 0, 1, 3 or 6 s
before the next write, and prints each write's seconds and its system (kernel) CPU seconds, and
how much the disk discarded while each file was deleted (/proc/diskstats). On a VM that hands
free memory back to its host (virtio-balloon free page reporting, here with
page_reporting.page_reporting_order=11 on the kernel command line), a write into memory freed
a moment before is several times cheaper than one into memory freed seconds before.
Checkpoint writes avoid the question with O_DIRECT (docs/checkpoints.md)."""
import argparse
import os
import shutil
import time

BLOCK = 8 << 20


def disk_discards():
    """(discards, sectors discarded, ms spent discarding) of the root device, or None."""
    device = os.path.basename(os.path.realpath("/dev/root")) if os.path.exists("/dev/root") else None
    with open("/proc/diskstats") as f:
        rows = [line.split() for line in f]
    for r in rows:
        if (device and r[2] == device) or (not device and r[2] in ("vda", "sda", "nvme0n1")):
            if len(r) >= 18:
                return int(r[14]), int(r[16]), int(r[17])
    return None


def write(path, nbytes, block):
    t0, c0 = time.time(), os.times()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = 0
    while written < nbytes:
        written += os.write(fd, block[:min(BLOCK, nbytes - written)])
    t1, c1 = time.time(), os.times()
    os.fsync(fd)
    os.close(fd)
    return t1 - t0, c1.system - c0.system, time.time() - t1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runs",
                                                  "page_cache"))
    p.add_argument("--gb", type=float, default=1.36)
    a = p.parse_args()
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    nbytes = int(a.gb * 1e9)
    block = os.urandom(BLOCK)
    print("| file | memory it takes | write s | of which system CPU s | fsync s |")
    print("|---|---|---|---|---|")
    previous = None
    for k, wait in enumerate([None, 0, 1, 3, 0, 6], 1):
        what = "free since the run began"
        if previous:
            before = disk_discards()
            t = time.time()
            os.remove(previous)
            removed = time.time() - t
            after = disk_discards()
            if before and after:
                print(f"|   | (deleting the previous file took {removed:.2f} s; the disk discarded "
                      f"{(after[1] - before[1]) * 512 / 1e9:.2f} GB in {after[2] - before[2]} ms meanwhile) | | | |")
            time.sleep(wait)
            what = f"freed {wait} s before"
        path = os.path.join(a.dir, f"f{k}.bin")
        w, sys_cpu, sync = write(path, nbytes, block)
        print(f"| {k} | {what} | {w:.2f} | {sys_cpu:.2f} | {sync:.2f} |")
        previous = path
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
