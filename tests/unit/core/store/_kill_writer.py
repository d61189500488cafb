"""Child process for the process-kill durability test (not a test module).

    python -m tests.unit.core.store._kill_writer <db-path> <round> [always|interval]

Appends forever in concurrent groups of 25 and prints ``<seq> <payload>`` for every acknowledged append,
flushing stdout after each group -- so every line the parent reads was acknowledged before it was printed.
"""

from __future__ import annotations

import asyncio
import sys

import anyio

from core.store import SqliteStore


async def main(path: str, rnd: str, sync: str) -> None:
    store = await SqliteStore.open(path, sync=sync)  # type: ignore[arg-type]
    print("ready", flush=True)
    i = 0
    while True:
        payloads = [f"{rnd}-{i + k}" for k in range(25)]
        acks = await asyncio.gather(*[store.append("kill.test", None, p.encode()) for p in payloads])
        sys.stdout.write("".join(f"{seq} {p}\n" for (seq, _), p in zip(acks, payloads, strict=True)))
        sys.stdout.flush()
        i += 25


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "always")
