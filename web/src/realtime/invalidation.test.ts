import { describe, expect, it } from "vitest";
import { covers, keyOfQuery, keysForNudge, nudgeConcerns, OPERATIONS, planNudges } from "./invalidation";

const RUN = "0b6c1f4e-7f3e-4d0e-9a55-1d2b3c4d5e6f";
const OTHER = "9f8e7d6c-5b4a-4321-8fed-cba987654321";

describe("keysForNudge", () => {
  it("run.created concerns the lists and the usage", () => {
    expect(keysForNudge({ type: "run.created", id: RUN })).toEqual([
      { kind: "runs" },
      { kind: "usage" },
    ]);
  });

  it("run.updated concerns that run, the lists and the usage", () => {
    expect(keysForNudge({ type: "run.updated", id: RUN })).toEqual([
      { kind: "run", id: RUN },
      { kind: "runs" },
      { kind: "usage" },
    ]);
  });

  it("run.event concerns only that run's timeline", () => {
    expect(keysForNudge({ type: "run.event", id: RUN })).toEqual([{ kind: "runEvents", id: RUN }]);
    expect(keysForNudge({ type: "run.event", id: null })).toEqual([]);
  });

  it("invitation and delivery nudges concern their screens", () => {
    expect(keysForNudge({ type: "invitation.updated", id: "x" })).toEqual([{ kind: "invitations" }]);
    expect(keysForNudge({ type: "webhook.delivery.updated", id: "d" })).toEqual([
      { kind: "webhooks" },
    ]);
    expect(keysForNudge({ type: "replay.updated", id: "r" })).toEqual([{ kind: "replays" }]);
    expect(keysForNudge({ type: "budget.updated", id: "b" })).toEqual([{ kind: "budgets" }]);
    expect(keysForNudge({ type: "member.updated", id: "u" })).toEqual([{ kind: "members" }]);
    expect(keysForNudge({ type: "schedule.updated", id: "s" })).toEqual([{ kind: "schedules" }]);
  });

  it("an unknown type concerns nothing", () => {
    expect(keysForNudge({ type: "tenant.renamed", id: "t" })).toEqual([]);
    expect(keysForNudge({ type: "" })).toEqual([]);
  });
});

describe("keyOfQuery", () => {
  it("names each of the app's nudge-driven operations", () => {
    expect(keyOfQuery("Runs", { first: 20, status: ["RUNNING"] })).toEqual({ kind: "runs" });
    expect(keyOfQuery("RunDetail", { id: RUN })).toEqual({ kind: "run", id: RUN });
    expect(keyOfQuery("RunWhy", { id: RUN })).toEqual({ kind: "run", id: RUN });
    expect(keyOfQuery("RunTimeline", { id: RUN, after: 0 })).toEqual({ kind: "runEvents", id: RUN });
    expect(keyOfQuery("Usage", { days: 30 })).toEqual({ kind: "usage" });
    expect(keyOfQuery("Invitations", {})).toEqual({ kind: "invitations" });
    expect(keyOfQuery("WebhookEndpoints", undefined)).toEqual({ kind: "webhooks" });
    expect(keyOfQuery("RunReplays", { first: 20 })).toEqual({ kind: "replays" });
    expect(keyOfQuery("Queue", { first: 50 })).toEqual({ kind: "runs" });
    expect(keyOfQuery("RunTree", { id: RUN, first: 20, after: null })).toEqual({ kind: "run", id: RUN });
  });

  it("leaves the rest alone", () => {
    expect(keyOfQuery("Viewer", {})).toBeNull();
    expect(keyOfQuery("Agents", {})).toBeNull();
    expect(keyOfQuery(undefined, {})).toBeNull();
    expect(keyOfQuery("toString", {})).toBeNull(); // not fooled by Object.prototype
    expect(keyOfQuery("RunDetail", {})).toBeNull(); // a run query without an id
  });

  it("covers every operation the table lists", () => {
    for (const name of Object.keys(OPERATIONS)) {
      expect(keyOfQuery(name, { id: RUN })).not.toBeNull();
    }
  });
});

describe("covers", () => {
  it("matches on kind and id", () => {
    expect(covers({ kind: "run", id: RUN }, { kind: "run", id: RUN })).toBe(true);
    expect(covers({ kind: "run", id: RUN }, { kind: "run", id: OTHER })).toBe(false);
    expect(covers({ kind: "run", id: RUN }, { kind: "runEvents", id: RUN })).toBe(false);
    expect(covers({ kind: "runs" }, { kind: "runs" })).toBe(true);
  });
});

describe("nudgeConcerns: the question asked of each active query", () => {
  const screens: [string, Record<string, unknown>][] = [
    ["Runs", { first: 20 }],
    ["Runs", { first: 20, status: ["SUCCEEDED"] }],
    ["RunDetail", { id: RUN }],
    ["RunDetail", { id: OTHER }],
    ["RunTimeline", { id: RUN, after: 0 }],
    ["RunTimeline", { id: OTHER, after: 0 }],
    ["RunWhy", { id: RUN }],
    ["RunSteps", { id: RUN, after: 0 }],
    ["RunSteps", { id: OTHER, after: 0 }],
    ["Usage", { days: 30 }],
    ["Invitations", {}],
    ["WebhookEndpoints", {}],
    ["Viewer", {}],
    ["Agents", {}],
    ["Budgets", {}],
    ["Members", {}],
    ["Schedules", {}],
  ];
  const refreshed = (type: string, id: string | null) =>
    screens.filter(([op, vars]) => nudgeConcerns({ type, id }, op, vars)).map(([op, vars]) =>
      "id" in vars ? `${op}:${vars["id"] === RUN ? "this" : "other"}` : op,
    );

  it("a run.updated refreshes that run and every runs list, never another run", () => {
    expect(refreshed("run.updated", RUN)).toEqual(["Runs", "Runs", "RunDetail:this", "RunWhy:this", "Usage"]);
  });

  it("a run.created refreshes the lists", () => {
    expect(refreshed("run.created", RUN)).toEqual(["Runs", "Runs", "Usage"]);
  });

  it("a run.event refreshes that run's timeline and steps only (waitingFor/wakeAt come with run.updated)", () => {
    expect(refreshed("run.event", RUN)).toEqual(["RunTimeline:this", "RunSteps:this"]);
  });

  it("an invitation nudge refreshes only the invitations", () => {
    expect(refreshed("invitation.updated", "i")).toEqual(["Invitations"]);
  });

  it("a budget nudge refreshes only the budgets, a member nudge only the members", () => {
    expect(refreshed("budget.updated", "b")).toEqual(["Budgets"]);
    expect(refreshed("member.updated", "u")).toEqual(["Members"]);
  });

  it("a schedule nudge refreshes only the schedules", () => {
    expect(refreshed("schedule.updated", "s")).toEqual(["Schedules"]);
  });

  it("a delivery nudge refreshes only the webhooks", () => {
    expect(refreshed("webhook.delivery.updated", "d")).toEqual(["WebhookEndpoints"]);
  });

  it("nothing refreshes the viewer or the agents", () => {
    for (const type of ["run.created", "run.updated", "run.event", "invitation.updated"]) {
      expect(refreshed(type, RUN)).not.toContain("Viewer");
      expect(refreshed(type, RUN)).not.toContain("Agents");
    }
  });
});

describe("planNudges: the least that covers a burst", () => {
  const q = (name: string, variables: Record<string, unknown>, shown: string[] = []) => ({
    name,
    variables,
    shows: (id: string) => shown.includes(id),
  });
  const screen = [
    q("Runs", { first: 20, after: null, status: null }, [RUN]), // 0: the list, showing RUN
    q("Runs", { first: 20, status: ["RUNNING"] }), // 1: a filtered list
    q("RunDetail", { id: OTHER }), // 2
    q("RunTimeline", { id: RUN, after: 0 }), // 3
    q("Usage", { days: 30 }), // 4
    q("Viewer", {}), // 5
  ];

  it("a run.updated for a run a list shows asks for that run alone, not the list", () => {
    expect(planNudges([{ type: "run.updated", id: RUN }], screen)).toEqual([
      { kind: "refetch", index: 1 }, // the filtered list: the run may enter or leave it
      { kind: "refetch", index: 4 }, // the counts by status
      { kind: "fetchRun", id: RUN },
    ]);
  });

  it("a run.updated for a run nothing shows leaves the unfiltered list alone", () => {
    const plain = [screen[0]!, screen[5]!];
    expect(planNudges([{ type: "run.updated", id: "nobody-shows-it" }], plain)).toEqual([]);
  });

  it("a run.updated for the run on screen asks for its detail, which updates the lists too", () => {
    expect(planNudges([{ type: "run.updated", id: OTHER }], [q("Runs", {}, [OTHER]), screen[2]!])).toEqual([
      { kind: "refetch", index: 1 },
    ]);
  });

  it("a run.event asks only for that run's timeline", () => {
    expect(planNudges([{ type: "run.event", id: RUN }], screen)).toEqual([{ kind: "refetch", index: 3 }]);
  });

  it("a run.created asks for the lists and the usage", () => {
    expect(planNudges([{ type: "run.created", id: RUN }], screen)).toEqual([
      { kind: "refetch", index: 0 },
      { kind: "refetch", index: 1 },
      { kind: "refetch", index: 4 },
    ]);
  });

  it("a burst asks for each thing once", () => {
    const burst = [
      ...Array.from({ length: 50 }, () => ({ type: "run.event", id: RUN })),
      ...Array.from({ length: 20 }, () => ({ type: "run.updated", id: RUN })),
      { type: "run.created", id: OTHER },
    ];
    expect(planNudges(burst, screen)).toEqual([
      { kind: "refetch", index: 0 },
      { kind: "refetch", index: 1 },
      { kind: "refetch", index: 3 },
      { kind: "refetch", index: 4 },
      { kind: "fetchRun", id: RUN },
    ]);
  });

  it("a run.updated for a child asks again for the tree that shows it, and for no other tree", () => {
    const page = [
      q("RunDetail", { id: OTHER }), // 0: the parent's page
      q("RunTree", { id: OTHER, first: 20, after: null }, ["child"]), // 1: its children
      q("RunTree", { id: "elsewhere", first: 20, after: null }, ["another-child"]), // 2
    ];
    expect(planNudges([{ type: "run.updated", id: "child" }], page)).toEqual([{ kind: "refetch", index: 1 }]);
    // the parent's own nudge (a child settled): its detail and its tree
    expect(planNudges([{ type: "run.updated", id: OTHER }], page)).toEqual([
      { kind: "refetch", index: 0 },
      { kind: "refetch", index: 1 },
    ]);
  });

  it("never asks for the viewer, and nothing for an unknown type", () => {
    expect(planNudges([{ type: "tenant.renamed", id: RUN }], screen)).toEqual([]);
  });
});
