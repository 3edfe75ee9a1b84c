import { buildSchema, type DocumentNode, parse, validate } from "graphql";
import { describe, expect, it } from "vitest";
import * as agents from "./documents/agents";
import * as budgets from "./documents/budgets";
import * as invitations from "./documents/invitations";
import * as members from "./documents/members";
import * as replays from "./documents/replays";
import * as runs from "./documents/runs";
import * as schedules from "./documents/schedules";
import * as tree from "./documents/tree";
import * as usage from "./documents/usage";
import * as viewer from "./documents/viewer";
import * as webhooks from "./documents/webhooks";
import { OPERATIONS } from "../realtime/invalidation";
import { NUDGES_SUBSCRIPTION } from "../realtime/socket";
import contractSdl from "./contract.graphql?raw";
import servedSdl from "../../schema.graphql?raw";

const schema = buildSchema(contractSdl);
const served = buildSchema(servedSdl);

const isDocument = (v: unknown): v is DocumentNode =>
  typeof v === "object" && v !== null && (v as { kind?: string }).kind === "Document";

const operations = Object.entries({ ...agents, ...budgets, ...members, ...runs, ...viewer, ...webhooks, ...invitations, ...usage, ...replays, ...tree, ...schedules })
  .filter(([, v]) => isDocument(v) && (v as DocumentNode).definitions.some((d) => d.kind === "OperationDefinition"))
  .map(([name, v]) => [name, v as DocumentNode] as const);

describe("the app's documents", () => {
  it("are all found", () => {
    expect(operations.map(([name]) => name).sort()).toEqual(
      [
        "AGENTS", "AWAITING_COUNT", "AGENT_STATES", "AGENT_STATS", "BUDGETS", "DELETE_BUDGET", "PAUSE_AGENT", "PAUSE_RUN", "RESUME_AGENT", "RESUME_RUN", "SET_BUDGET", "AWAITING_INPUT", "CANCEL_RUN", "CANCEL_RUN_REPLAY", "CANCEL_RUNS", "CANCEL_RUNS_COUNT", "CREATE_WEBHOOK_ENDPOINT", "DELETE_WEBHOOK_ENDPOINT",
        "INVITATIONS", "INVITE_MEMBER", "MEMBERS", "REMOVE_MEMBER", "SET_MEMBER_ROLE", "KEY_HOLDER", "RESEND_INVITATION", "REVOKE_INVITATION", "QUEUE", "REDELIVER_FAILED_WEBHOOKS", "REDELIVER_WEBHOOK", "RETRY_PENDING_WEBHOOK_DELIVERIES", "RETRY_WEBHOOK_DELIVERY", "REPLAY_RUNS", "REPLAY_RUNS_COUNT", "RETRY_RUN", "RUNS",
        "RUN_DETAIL", "RUNS_BY_ID_PREFIX", "SCHEDULES", "CREATE_SCHEDULE", "PAUSE_SCHEDULE", "RESUME_SCHEDULE", "DELETE_SCHEDULE", "TRIGGER_SCHEDULE", "RUN_REPLAYS", "RUN_STEPS", "RUN_STEP_DETAIL", "RUNS_COST", "RUN_STEP_RESULTS", "RUN_TIMELINE", "RUN_TREE", "RUN_WHY", "SEND_TEST_WEBHOOK", "SIGNAL_RUN", "START_RUN", "USAGE", "USAGE_TOKENS", "VIEWER", "WEBHOOK_DELIVERY_ATTEMPTS", "WEBHOOK_ENDPOINT_DELIVERIES", "WEBHOOK_ENDPOINTS",
      ].sort(),
    );
  });

  it.each(operations)("%s is valid against the contract's schema", (_, document) => {
    expect(validate(schema, document).map((e) => e.message)).toEqual([]);
  });

  it("include a document for every operation name the nudges refresh", () => {
    const names = operations.flatMap(([, d]) =>
      d.definitions.flatMap((def) => (def.kind === "OperationDefinition" && def.name ? [def.name.value] : [])),
    );
    for (const name of Object.keys(OPERATIONS)) expect(names).toContain(name);
  });

  it.each(operations)("%s is valid against the schema the server serves (codegen's)", (_, document) => {
    expect(validate(served, document).map((e) => e.message)).toEqual([]);
  });

  it("the timeline asks for EVENTS_PAGE events a page", () => {
    const text = JSON.stringify(runs.RUN_TIMELINE);
    expect(text).toContain(`"value":"${runs.EVENTS_PAGE}"`);
  });

  it("the steps list asks for STEPS_PAGE steps a page", () => {
    const text = JSON.stringify(runs.RUN_STEPS);
    expect(text).toContain(`"value":"${runs.STEPS_PAGE}"`);
  });

  it("the nudge subscription is valid too", () => {
    const document = parse(NUDGES_SUBSCRIPTION);
    expect(validate(schema, document).map((e) => e.message)).toEqual([]);
  });
});
