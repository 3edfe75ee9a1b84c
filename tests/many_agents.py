"""Many agents for the admission tests and benchmarks: there is at most one active run per tenant
and agent, so a tenant floods the queue by starting runs of many agents at once. Loaded with
`OUTLIVE_AGENT_MODULES=tests.many_agents:AGENTS` (the `demo` agent under other names)."""

from __future__ import annotations

from outlive.agents import demo
from outlive.agents.registry import Agent

AGENTS = [
    Agent(name=f"many-{i}", description="demo, again", input_model=demo.DemoInput, run=demo.run)
    for i in range(5000)
]
