import { describe, expect, it } from "vitest";
import { queuedLine } from "./why";

describe("why a queued run has not started", () => {
  const base = { createdAt: new Date(0).toISOString(), key: "", queuedBehindId: null, waitingReason: null };

  it("names the run ahead of it in its key's line", () => {
    const line = queuedLine({ ...base, key: "conversation:42", queuedBehindId: "0b6c1f4e-0000-4000-8000-000000000000", waitingReason: "queued behind run …" }, 0);
    expect(line).toContain("Queued behind run 0b6c1f4e");
    expect(line).toContain("`conversation:42`");
    expect(queuedLine({ ...base, queuedBehindId: "0b6c1f4e-0000-4000-8000-000000000000" }, 0)).toContain("its agent's default key");
  });

  it("else its tenant's cap, else a worker", () => {
    expect(queuedLine({ ...base, waitingReason: "this tenant runs at most 2" }, 0)).toBe("Waiting for a slot: this tenant runs at most 2.");
    expect(queuedLine(base, 0)).toContain("waiting for a worker to claim it");
  });
});
