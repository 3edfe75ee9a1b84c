"""The slow tier, in one list: what `uv run pytest -m "not slow"` leaves out.

A test is slow when it starts processes (`outlive api`, `outlive worker`, the CLI, its own Redis
or PostgreSQL), drives a browser, or waits out real timeouts and bursts. The fast tier is the
rest: every service, resolver, pipeline and unit test against the real PostgreSQL and Redis
(`uv run pytest -m "not slow" -n 4`: 75 s on two cores). CI runs both tiers, serially. An
entry that names no collected test fails the collection, so the list cannot rot when a test is
renamed.
"""

from __future__ import annotations

import pytest

SLOW_MODULES = (
    "tests/agents/test_pydantic_ai_crash.py",
    "tests/agents/test_broken_module_worker.py",
    "tests/agents/test_replay_crash.py",
    "tests/browser/",
    "tests/chaos/",  # test_budget_chaos.py too
    "tests/cluster/",
    "tests/cells/test_clusters.py",
    "tests/cells/test_move.py",
    "tests/relay/",
    "tests/db/test_cli_pgbouncer.py",
    "tests/db/test_failover.py",
    "tests/db/test_postgres_restart.py",
    "tests/fuzz/",
    "tests/jobs/test_sweep.py",
    "tests/keys/test_race.py",
    "tests/realtime/test_cleanup.py",
    "tests/realtime/test_cluster.py",
    "tests/realtime/test_every_change.py",
    "tests/realtime/test_memory.py",
    "tests/realtime/test_processes.py",
    "tests/resolvers/test_pause_many.py",
    "tests/services/test_admission.py",
    "tests/services/test_outbox.py",
    "tests/telemetry/test_genai_spans.py",
    "tests/telemetry/test_logs.py",
    "tests/telemetry/test_retry_logs.py",
    "tests/testing/",
    "tests/test_cli.py",
    "tests/test_cold_start.py",
    "tests/test_cli_limits.py",
    "tests/test_cli_replay.py",
    "tests/test_headers.py",
    "tests/waits/test_worker.py",
    "tests/workflows/test_children_crash.py",
    "tests/workflows/test_crash.py",
    "tests/workflows/test_postgres_lost.py",
    "tests/workflows/test_steps_crash.py",
    "tests/workflows/test_usage_crash.py",
    "tests/agents/test_model_limits.py",
)
SLOW_TESTS = (
    "tests/schedules/test_flow.py::test_each_burst_of_a_key_makes_one_run_with_its_last_input",
    "tests/test_run_budget.py::test_one_run_costs_what_the_budget_says",
    "tests/test_run_budget.py::test_one_run_costs_the_same_on_a_redis_cluster",
    "tests/cron/test_dispatch.py::test_two_worker_processes_run_each_tick_exactly_once",
    "tests/graphql/test_coalescing.py::test_a_commit_made_before_a_read_arrives_is_in_its_answer",
    "tests/jobs/test_consumer.py::test_a_failing_handler_is_retried_on_the_exact_doubling_schedule",
    "tests/jobs/test_redrive.py::test_the_cli_lists_and_redrives",
    "tests/realtime/test_outputs.py::test_many_readers_of_one_run_each_get_its_whole_text_once",
    "tests/realtime/test_revocation.py::test_a_revoked_token_closes_its_sockets_on_every_api_process_at_once",
    "tests/realtime/test_sockets.py::test_a_client_that_never_sends_connection_init_is_closed_within_10_s",
    "tests/telemetry/test_metrics.py::test_api_workers_share_one_view_of_the_metrics",
    "tests/telemetry/test_metrics.py::test_a_worker_serves_metrics_on_its_port",
    "tests/telemetry/test_sampling.py::test_a_real_api_at_ratio_zero_exports_nothing_for_a_sampled_caller",
    "tests/telemetry/test_tracing.py::test_the_standard_otlp_variables_switch_tracing_on",
)


def mark_slow(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tier; on a whole-suite collection, fail when an entry of the lists matches
    nothing collected."""
    unmatched = set(SLOW_MODULES) | set(SLOW_TESTS)
    for item in items:
        node = item.nodeid.split("[")[0]
        hits = {m for m in SLOW_MODULES if node.startswith(m)}
        hits |= {t for t in SLOW_TESTS if node == t}
        if hits:
            item.add_marker(pytest.mark.slow)
            unmatched -= hits
    whole_suite = config.args_source is pytest.Config.ArgsSource.TESTPATHS
    if unmatched and whole_suite:
        raise pytest.UsageError(f"tests/slow.py names tests that do not exist: {sorted(unmatched)}")
