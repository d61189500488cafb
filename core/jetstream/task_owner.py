"""A service whose work the JetStream API starts and does not wait for (a bulk read that waits
for messages, a snapshot sent a window at a time, a restore waiting for its client's chunks).

Its tasks run in a task group of its own, which ``run`` holds open inside JetStream's task group:
they end with JetStream, and while ``run`` is not running none starts (``_tg`` is None: the
handler answers that the service is not being served)."""

from __future__ import annotations

import anyio
import anyio.abc


class TaskOwner:
    def __init__(self) -> None:
        self._tg: anyio.abc.TaskGroup | None = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self._tg = None
                tg.cancel_scope.cancel()
