"""merge_worst_case.py: the newest-first merge with and without `KeyRuns` where no key run repeats.

"unique": 600 batches of 1 000 keys, all distinct. "shuffled": 600 batches of the same 1 000 keys, each in
another order (every key seen, no run repeats). Prints CPU ms per full merge, twice each.
"""
import random
import time

from cohort.coordinator.log.batch import KeyRuns, encode_batch, read_batch


def batches(kind: str, count: int = 600, n: int = 1000) -> list[bytes]:
    out = []
    for b in range(count):
        names = [f"group-{b if kind == 'unique' else 'x'}-topic-name-{i}" for i in range(n)]
        if kind == "shuffled":
            random.shuffle(names)
        out.append(encode_batch(b * n, 0, [b"\x00\x01" + s.encode() + b"\x00\x00\x00\x01" for s in names],
                                [b"v" * 24] * n))
    return out


def merge_ms(bufs: list[bytes], key_runs: KeyRuns | None) -> float:
    views = [read_batch(buf, 0, 0) for buf in bufs]
    latest: dict = {}
    started = time.process_time()
    for buf, view in zip(reversed(bufs), reversed(views)):
        view.merge_older_into(buf, latest, key_runs)
    return (time.process_time() - started) * 1000


if __name__ == "__main__":
    for kind in ("unique", "shuffled"):
        bufs = batches(kind)
        for _ in range(2):
            print(f"{kind:9} without {merge_ms(bufs, None):6.1f} ms   with KeyRuns {merge_ms(bufs, KeyRuns()):6.1f} ms")
