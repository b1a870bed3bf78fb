"""The heap keeper: survivors of a full collection are frozen (later full collections skip them), and a
refreeze reclaims cycles among frozen objects; a process keeps few malloc arenas. Run in child interpreters:
freezing and the allocator's settings are process-wide."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import asyncio, gc, weakref
    from cohort.coordinator.process.heap import HeapKeeper

    class Node:
        pass

    async def main():
        keeper = HeapKeeper(refreeze_interval_s=3600)
        keeper.start()
        frozen_at_start = gc.get_freeze_count()
        assert frozen_at_start > 0, "start-up's heap is frozen"

        a, b = Node(), Node()
        a.other, b.other = b, a            # a cycle that survives the next full collection
        gone = weakref.ref(a)
        gc.collect()                        # a full collection; its survivors are frozen on the loop
        for _ in range(100):
            if gc.get_freeze_count() > frozen_at_start:
                break
            await asyncio.sleep(0.01)
        assert gc.get_freeze_count() > frozen_at_start, "survivors of a full collection are frozen"

        del a, b                            # now garbage, but frozen: no collection walks it
        gc.collect()
        assert gone() is not None, "a frozen cycle is left alone by full collections"
        keeper.refreeze()                   # everything collected once, survivors frozen again
        assert gone() is None, "a refreeze reclaims cycles among frozen objects"
        assert gc.get_freeze_count() > 0
        keeper.stop()
        print("ok")

    asyncio.run(main())
""")


def test_full_collections_freeze_their_survivors_and_a_refreeze_reclaims_frozen_cycles():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


ARENAS_SCRIPT = textwrap.dedent("""
    import ctypes, sys, tempfile, threading
    from cohort.coordinator.process import heap

    if sys.argv[1] == "limit":
        heap.limit_malloc_arenas()
    barrier = threading.Barrier(6)

    def work():
        blobs = [bytearray(100_000) for _ in range(20)]  # big enough for malloc itself, not pymalloc
        barrier.wait()  # all six threads alive at once: none takes over an arena another left behind

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    libc = ctypes.CDLL("libc.so.6")
    libc.fopen.restype = ctypes.c_void_p
    path = tempfile.mktemp()
    out = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(out))  # glibc's XML report: one <heap> per arena
    libc.fclose(ctypes.c_void_p(out))
    print(open(path).read().count("<heap nr="))
""")


def _arenas(mode: str, **env: str) -> int:
    done = subprocess.run([sys.executable, "-c", ARENAS_SCRIPT, mode], capture_output=True, text=True, timeout=60,
                          env={**{k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}, **env})
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_a_process_keeps_at_most_two_malloc_arenas_unless_malloc_arena_max_says_otherwise():
    assert _arenas("none") > 2  # glibc's default: an arena per thread (what left loaded logs' garbage resident)
    assert _arenas("limit") == 2
    assert _arenas("limit", MALLOC_ARENA_MAX="4") == 4  # the operator's setting wins
