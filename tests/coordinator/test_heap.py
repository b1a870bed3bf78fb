"""The heap keeper: survivors of a full collection are frozen (later full collections skip them), and a
refreeze reclaims cycles among frozen objects. Run in a child interpreter: freezing is process-wide."""
from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import asyncio, gc, weakref
    from cohort.coordinator.heap import HeapKeeper

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
