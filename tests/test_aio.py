"""cockpit.aio.reap: waiting for a cancelled task must not swallow the caller's own cancellation
(Ctrl-C cancels the main task; a `suppress(CancelledError)` around `await task` used to eat it)."""

from __future__ import annotations

import asyncio

import pytest

from cockpit.aio import reap


def test_reap_ignores_how_the_task_ended() -> None:
    async def main() -> None:
        async def boom() -> None:
            raise RuntimeError("x")

        t = asyncio.ensure_future(asyncio.sleep(10))
        t.cancel()
        await reap(t)  # cancelled: fine
        e = asyncio.ensure_future(boom())
        await reap(e)  # failed: fine
        e2 = asyncio.ensure_future(boom())
        with pytest.raises(RuntimeError):
            await reap(e2, errors=False)

    asyncio.run(main())


def test_reap_keeps_the_callers_own_cancellation() -> None:
    async def main() -> str:
        async def slow_to_die() -> None:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                await asyncio.sleep(0.2)  # a task that takes a while to wind down
                raise

        async def closer() -> str:
            t = asyncio.ensure_future(slow_to_die())
            await asyncio.sleep(0)
            t.cancel()
            await reap(t)  # the caller is cancelled while it waits here
            return "went on as if nothing happened"

        c = asyncio.ensure_future(closer())
        await asyncio.sleep(0.05)
        c.cancel()
        try:
            return await c
        except asyncio.CancelledError:
            return "cancelled"

    assert asyncio.run(main()) == "cancelled"
