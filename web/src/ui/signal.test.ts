import { describe, expect, it } from "vitest";
import { approvalInput, describeShown, readSignalForm } from "./signal";

describe("readSignalForm", () => {
  it("parses the payload as JSON and keeps the key when given", () => {
    expect(readSignalForm("r1", " approval ", '{"approved": true}', "k-1")).toEqual({
      ok: true,
      input: { id: "r1", name: "approval", payload: { approved: true }, idempotencyKey: "k-1" },
    });
  });

  it("an empty payload is null and an empty key is left out", () => {
    expect(readSignalForm("r1", "go", "  ", "")).toEqual({ ok: true, input: { id: "r1", name: "go", payload: null } });
  });

  it("refuses a payload that is not JSON, saying so", () => {
    const form = readSignalForm("r1", "go", "{approved: true}", "");
    expect(form.ok).toBe(false);
    expect(form).toMatchObject({ field: "payload" });
    expect(!form.ok && form.error).toMatch(/^The payload is not valid JSON \(.+\); nothing was sent\.$/);
  });

  it("refuses an empty name", () => {
    expect(readSignalForm("r1", "  ", "{}", "")).toMatchObject({ ok: false, field: "name" });
  });
});

describe("approvalInput", () => {
  it("sends {approved} to `approval`, bound to the wait shown, one key per wait", () => {
    expect(approvalInput({ id: "r1", attempt: 2, waitId: "wait-2" }, true)).toEqual({
      id: "r1",
      name: "approval",
      payload: { approved: true },
      idempotencyKey: "console:approval:r1:wait-2",
      waitId: "wait-2",
    });
    expect(approvalInput({ id: "r1", attempt: 2, waitId: null }, true).waitId).toBeUndefined();
    expect(approvalInput({ id: "r1", attempt: 2 }, false).payload).toEqual({ approved: false });
    expect(approvalInput({ id: "r1", attempt: 3 }, true).idempotencyKey).not.toBe(
      approvalInput({ id: "r1", attempt: 2 }, true).idempotencyKey,
    );
  });
});

describe("Reject", () => {
  it("sends the reason only when one was given, under Approve's key", async () => {
    const { rejectionInput, approvalInput } = await import("./signal");
    const run = { id: "r", attempt: 2 };
    expect(rejectionInput(run, "  ")).toEqual(approvalInput(run, false));
    expect(rejectionInput(run, " too costly ").payload).toEqual({ approved: false, reason: "too costly" });
    expect(rejectionInput(run, "x").idempotencyKey).toBe(approvalInput(run, true).idempotencyKey);
  });
});

describe("describeShown", () => {
  it("names the tool call an approval decides, with its arguments", () => {
    const show = { tool: "refund", args: { order_id: "A-2", amount: 900 }, toolCallId: "call_2" };
    expect(describeShown(show)).toBe('refund(order_id: "A-2", amount: 900)');
  });

  it("shows anything else as JSON, and nothing for a wait that shows nothing", () => {
    expect(describeShown({ deploy: "v2" })).toBe('{"deploy":"v2"}');
    expect(describeShown(null)).toBeNull();
    expect(describeShown(undefined)).toBeNull();
  });
});
