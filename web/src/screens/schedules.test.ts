import { describe, expect, it } from "vitest";
import { EMPTY_SCHEDULE, nextFire, overlapWords, readScheduleForm } from "./schedules";

const NOW = Date.parse("2026-01-01T13:00:00.000Z");

describe("readScheduleForm", () => {
  it("reads a whole form into createSchedule's input", () => {
    const read = readScheduleForm({ ...EMPTY_SCHEDULE, agent: " demo ", cron: "*/5  * * * *", input: '{"turns": 2}', key: "k", jitterSeconds: "30" });
    expect(read).toEqual({
      ok: true,
      input: { agent: "demo", cron: "*/5 * * * *", timezone: "UTC", input: { turns: 2 }, onConflict: "REJECT", jitterSeconds: 30, key: "k" },
    });
  });
  it("names the first wrong field and why", () => {
    expect(readScheduleForm({ ...EMPTY_SCHEDULE })).toMatchObject({ ok: false, field: "agent" });
    expect(readScheduleForm({ ...EMPTY_SCHEDULE, agent: "demo", cron: "* * *" })).toMatchObject({ ok: false, field: "cron" });
    expect(readScheduleForm({ ...EMPTY_SCHEDULE, agent: "demo", cron: "@daily", input: "[1]" })).toMatchObject({ ok: false, field: "input" });
    expect(readScheduleForm({ ...EMPTY_SCHEDULE, agent: "demo", input: "{" })).toMatchObject({ ok: false, field: "input" });
    expect(readScheduleForm({ ...EMPTY_SCHEDULE, agent: "demo", jitterSeconds: "-1" })).toMatchObject({ ok: false, field: "jitterSeconds" });
    expect(readScheduleForm({ ...EMPTY_SCHEDULE, agent: "demo", timezone: " " })).toMatchObject({ ok: false, field: "timezone" });
  });
  it("leaves the key out when none is given (the server's default, schedule:<id>)", () => {
    const read = readScheduleForm({ ...EMPTY_SCHEDULE, agent: "demo" });
    expect(read.ok && "key" in read.input).toBe(false);
  });
});

describe("the words", () => {
  it("say when it fires next", () => {
    expect(nextFire({ paused: true, nextFireAt: null }, NOW)).toBe("paused");
    expect(nextFire({ paused: false, nextFireAt: "2026-01-01T12:59:00.000Z" }, NOW)).toBe("due now");
    expect(nextFire({ paused: false, nextFireAt: "2026-01-01T13:03:00.000Z" }, NOW)).toContain("3 min");
  });
  it("say the overlap policy", () => {
    expect(overlapWords("ENQUEUE")).toBe("Queue behind the last run");
    expect(overlapWords("SIGNAL_EXISTING")).toBe("SIGNAL_EXISTING");
  });
});
