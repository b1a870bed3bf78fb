"""Per-request CPU breakdown of a `cohort serve` from a py-spy raw profile (docs/compiled-path.md).

    py-spy record -p PID -r 500 -d 20 -f raw -o commit.txt   # while `python -m bench run` loads it
    py-spy record -p PID -r 250 -d 12 --native -f raw -o commit.txt   # the compiled path
    python -m bench.profile_breakdown commit.txt

Only the event loop's thread counts (the writer threads' segment writes are off the request path).
A sample is put in the first step, from the innermost frame out, whose module or function names it;
a Python frame that is itself the sample's leaf and only calls into the kernel (a socket write, the
fsync helper's pipe, uvloop's C loop) counts as a syscall.
"""
from __future__ import annotations

import argparse
import collections

SYSCALL_LEAVES = ("Connection._write_out", "FsyncProcess.sync", "write_all", "Runner.run", "socket.accept")
# With `py-spy record --native` (the compiled path: its modules have no Python frames), a leaf in libc
# that is one of these calls is a syscall.
NATIVE_SYSCALLS = ("write (libc", "send (libc", "read (libc", "recv (libc", "epoll_pwait (libc",
                   "pwrite64 (libc", "fdatasync (libc", "writev (libc", "sendmsg (libc", "recvmsg (libc")
# Markers match a Python frame's file (`x.py`) and a compiled module's (`x.cpython-311-….so`) alike;
# the build's generated codecs are `decode_<Message>Request_v<N>` and `encode_<Message>Response_v<N>`.
STEPS = (
    ("decode", ("<decode", "decode_request", "FrameReader", "decode_request_header", "Request_v")),
    ("records", ("<encode OffsetCommit>", "<encode GroupMetadata", "records/")),
    ("encode", ("<encode", "encode_response", "Response_v")),
    ("append", ("commit_rounds.", "log/batch.", "journal.", "log/state.", "durable_future.",
                "fsync_process.", "offsets_log.", "segments.")),
    ("engine", ("groups/",)),
    ("dispatch", ("connection.", "handlers.", "eager_tasks.", "metrics.")),
)


def breakdown(path: str) -> tuple[int, collections.Counter]:
    total, steps = 0, collections.Counter()
    with open(path) as lines:
        for line in lines:
            stack, _, count = line.rstrip().rpartition(" ")
            if "asyncio/runners.py" not in stack:
                continue  # not the event loop's thread
            n = int(count)
            total += n
            frames = stack.split(";")
            if any(leaf in frames[-1] for leaf in SYSCALL_LEAVES) or frames[-1].startswith(NATIVE_SYSCALLS):
                steps["syscalls"] += n
                continue
            steps[_step(frames)] += n
    return total, steps


def _step(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, markers in STEPS:
            if any(marker in frame for marker in markers):
                return name
    return "loop (other)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="+", help="py-spy raw (collapsed) profiles")
    for path in parser.parse_args().profiles:
        total, steps = breakdown(path)
        print(f"{path}: {total} event-loop samples")
        for name, n in steps.most_common():
            print(f"  {name:14s} {100 * n / max(total, 1):5.1f} %")


if __name__ == "__main__":
    main()
