"""The console's CPU budget lets waiting requests in by turns between browser addresses: a browser with many
requests waiting never holds another's. Real asyncio timers; the CPU clock is the test's, advanced by what
each admitted request "spends"."""
from __future__ import annotations

import asyncio

from cohort.coordinator.console.cpu_budget import CpuBudget

COST_S = 0.02  # CPU each admitted request spends
SHARE = 0.5  # so one is let in every COST_S / SHARE = 40 ms once over


class SpentCpu:
    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


async def _serve(budget: CpuBudget, cpu: SpentCpu, browser: str, order: list[str]) -> None:
    await budget.admit(browser)
    order.append(browser)
    cpu.seconds += COST_S


def test_a_browser_with_twenty_requests_waiting_holds_another_browsers_request_for_one_turn_at_most():
    async def scenario() -> list[str]:
        cpu = SpentCpu()
        budget = CpuBudget(SHARE, window_s=10.0, cpu=cpu)
        cpu.seconds = 0.1  # already over: everything below waits
        order: list[str] = []
        flood = [asyncio.create_task(_serve(budget, cpu, "10.0.0.1", order)) for _ in range(20)]
        await asyncio.sleep(0)
        other = asyncio.create_task(_serve(budget, cpu, "10.0.0.2", order))
        await asyncio.wait_for(asyncio.gather(*flood, other), 30)
        return order

    order = asyncio.run(scenario())
    assert len(order) == 21
    assert order.index("10.0.0.2") <= 1, order  # one turn of the flooding browser at most, then its own


def test_within_the_budget_requests_go_in_at_once_and_a_cancelled_wait_leaves_the_line():
    async def scenario() -> tuple[float, list[str]]:
        cpu = SpentCpu()
        budget = CpuBudget(SHARE, window_s=10.0, cpu=cpu)
        loop = asyncio.get_running_loop()
        started = loop.time()
        order: list[str] = []
        await _serve(budget, cpu, "10.0.0.1", order)
        at_once = loop.time() - started
        cpu.seconds = 0.1
        gone = asyncio.create_task(_serve(budget, cpu, "10.0.0.3", order))
        await asyncio.sleep(0)
        gone.cancel()
        after = asyncio.create_task(_serve(budget, cpu, "10.0.0.4", order))
        await asyncio.wait_for(after, 30)
        assert budget.waiting == 0
        return at_once, order

    at_once, order = asyncio.run(scenario())
    assert at_once < 0.05
    assert order == ["10.0.0.1", "10.0.0.4"]
