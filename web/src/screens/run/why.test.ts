import { describe, expect, it } from "vitest";
import { pastWait, queuedLine } from "./why";

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

describe("a finished wait in words", () => {
  it("names what the run waited for: a timer, a signal, its children, a budget", () => {
    expect(pastWait({ for: null, by: "timer", duration: 2000 })).toBe("It slept for 2.0 s, then was woken by its timer.");
    expect(pastWait({ for: "approval", by: "signal", duration: 313 })).toBe(
      "It waited for the signal `approval` for 313 ms, then was woken by a signal.",
    );
    expect(pastWait({ for: "children", by: "children", duration: 313 })).toBe(
      "It waited for its child runs for 313 ms, then went on once they had settled.",
    );
    expect(pastWait({ for: "children", by: "cancelled", duration: 50 })).toBe(
      "It waited for its child runs for 50 ms, then was cancelled while waiting.",
    );
    expect(pastWait({ for: "budget", by: "period", duration: 1500 })).toBe("It was held by a budget for 1.5 s, then was let go.");
  });
});
