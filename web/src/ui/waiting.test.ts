import { describe, expect, it } from "vitest";
import { awaitsPerson, holdOf, waitingDetail, waitingSentence, waitingShort, waitsForSignal } from "./waiting";

const NOW = Date.parse("2026-01-01T13:04:00.000Z");
const clock = (iso: string) => iso.slice(11, 16); // a fixed formatter: the tests do not depend on the locale

describe("waitingSentence", () => {
  it("names the signal, the time and how soon", () => {
    expect(waitingSentence({ waitingFor: "approval", wakeAt: "2026-01-01T14:02:00.000Z" }, NOW, clock)).toBe(
      "Waiting for the signal `approval` until 14:02 (in 58 min).",
    );
  });

  it("a timer reads as sleeping", () => {
    expect(waitingSentence({ waitingFor: null, wakeAt: "2026-01-01T13:04:30.000Z" }, NOW, clock)).toBe(
      "Sleeping until 13:04 (in 30 s).",
    );
  });

  it("a wait with no timeout says so", () => {
    expect(waitingSentence({ waitingFor: "go", wakeAt: null }, NOW, clock)).toBe(
      "Waiting for the signal `go`, with no timeout.",
    );
  });

  it("a time already past says the wake-up is due", () => {
    expect(waitingSentence({ waitingFor: null, wakeAt: "2026-01-01T13:03:55.000Z" }, NOW, clock)).toBe(
      "Sleeping until 13:03 (5 s ago): its timer is due, so it resumes in a moment.",
    );
    expect(waitingSentence({ waitingFor: "approval", wakeAt: "2026-01-01T13:03:00.000Z" }, NOW, clock)).toContain(
      "its timeout is due",
    );
  });
});

describe("waitingDetail", () => {
  it("says what ends the wait", () => {
    expect(
      waitingDetail({
        waitingFor: "approval",
        wakeAt: "2026-01-01T14:02:00.000Z",
      }),
    ).toContain("A signal named `approval` resumes it; with none by then");
    expect(waitingDetail({ waitingFor: null, wakeAt: "2026-01-01T14:02:00.000Z" })).toBe(
      "Its timer resumes it. It holds no worker meanwhile.",
    );
  });
});

describe("a run held on its code version", () => {
  const held = {
    status: "WAITING" as const,
    waitingFor: "version",
    wakeAt: null,
  };
  it("is a hold a person lifts: listed in the inbox, not taken for a signal", () => {
    expect(holdOf(held)).toBe("version");
    expect(awaitsPerson(held)).toBe(true);
    expect(waitsForSignal(held)).toBe(false);
    expect(awaitsPerson({ waitingFor: "children" })).toBe(false);
    expect(holdOf({ status: "SUCCEEDED", waitingFor: "version" })).toBeNull();
  });
  it("says why and what ends it", () => {
    expect(waitingSentence(held, NOW, clock)).toContain("Held on its code version");
    expect(waitingDetail(held)).toContain("Deploy a fix");
    expect(waitingShort(held)).toBe("held on its code version");
  });
});

describe("a parent waiting for its children", () => {
  it("is said as such, not as a signal named children", () => {
    const parent = { status: "WAITING", waitingFor: "children", wakeAt: null };
    expect(waitingSentence(parent, NOW, clock)).toBe("Waiting for its children.");
    expect(waitingSentence({ ...parent, wakeAt: "2026-01-01T13:10:00.000Z" }, NOW, clock)).toBe(
      "Waiting for its children, until 13:10 (in 6 min) at the latest.",
    );
    expect(waitingDetail(parent)).toContain("once the children it waits for have settled");
    expect(waitsForSignal(parent)).toBe(false);
  });
});
