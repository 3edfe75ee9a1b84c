import { describe, expect, it } from "vitest";
import { attemptLabel, countAttempts, retryWord } from "./attempts";

const band = (end: string) => ({ end }) as never;
const wait = (by: string | null) => ({ by }) as never;

describe("the attempt label", () => {
  it("does not count resumes as retries", () => {
    const count = countAttempts({ bands: [band("waiting"), band("waiting"), band("succeeded")], waits: [wait("timer"), wait("signal")] }, 2);
    expect(attemptLabel(count)).toBe("Attempt 1 of 3, resumed twice");
  });
  it("counts retries and lost workers apart", () => {
    const count = countAttempts({ bands: [band("retrying"), band("lost"), band("succeeded")], waits: [] }, 1);
    expect(attemptLabel(count)).toBe("Attempt 2 of 3, lost its worker once");
  });
  it("says no total when retriesLeft is unknown", () => {
    expect(attemptLabel(countAttempts({ bands: [], waits: [wait(null)] }, null))).toBe("Attempt 1");
  });
  it("calls a retry of a success Run again", () => {
    expect(retryWord("SUCCEEDED")).toBe("Run again");
    expect(retryWord("FAILED")).toBe("Retry");
  });
});
