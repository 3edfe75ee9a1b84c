/** The Schedules screen's form and words (pure: tested without a browser). */

import type { RunConflict, Schedule, ScheduleInput } from "../api/documents/schedules";
import { formatRelative } from "../ui/format";

export interface ScheduleForm {
  agent: string;
  cron: string;
  timezone: string;
  /** the runs' input, as JSON text */
  input: string;
  key: string;
  onConflict: RunConflict;
  jitterSeconds: string;
}

export type ScheduleField = "agent" | "cron" | "timezone" | "input" | "jitterSeconds";

/** The person's own zone: what a schedule made here most likely means. */
export function localZone(): string {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
}

export const EMPTY_SCHEDULE: ScheduleForm = {
  agent: "",
  cron: "0 9 * * 1-5",
  timezone: "UTC",
  input: "{}",
  key: "",
  onConflict: "REJECT",
  jitterSeconds: "0",
};

/** The overlap policies a schedule offers, in words (CONTRACT §7 "Schedules"). */
export const OVERLAPS: { value: RunConflict; label: string }[] = [
  { value: "REJECT", label: "Skip while the last run is active" },
  { value: "ENQUEUE", label: "Queue behind the last run" },
  { value: "CANCEL_PREVIOUS", label: "Cancel the last run" },
];

const MACROS = new Set(["@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually", "@midnight"]);

/**
 * The input `createSchedule` takes, or the first field that is wrong and why. The server checks
 * the cron expression and the zone for real; this catches what needs no server.
 */
export function readScheduleForm(
  form: ScheduleForm,
): { ok: true; input: ScheduleInput } | { ok: false; field: ScheduleField; error: string } {
  const agent = form.agent.trim();
  if (!agent) return { ok: false, field: "agent", error: "Pick the agent its runs start." };
  const cron = form.cron.trim().replace(/\s+/g, " ");
  if (!MACROS.has(cron) && cron.split(" ").length !== 5) {
    return { ok: false, field: "cron", error: "Five fields (minute hour day month weekday), or @hourly, @daily…" };
  }
  const timezone = form.timezone.trim();
  if (!timezone) return { ok: false, field: "timezone", error: "An IANA zone, such as Europe/Paris or UTC." };
  let input: unknown;
  try {
    input = JSON.parse(form.input.trim() || "{}");
  } catch {
    return { ok: false, field: "input", error: "Not JSON: the runs' input is a JSON object." };
  }
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    return { ok: false, field: "input", error: "A JSON object, such as {} or {\"turns\": 2}." };
  }
  const jitter = Number(form.jitterSeconds.trim() || "0");
  if (!Number.isInteger(jitter) || jitter < 0) {
    return { ok: false, field: "jitterSeconds", error: "Whole seconds, 0 or more." };
  }
  const key = form.key.trim();
  return {
    ok: true,
    input: { agent, cron, timezone, input, onConflict: form.onConflict, jitterSeconds: jitter, ...(key ? { key } : {}) },
  };
}

/** "in 3 min", "due now", "paused": when it fires next. */
export function nextFire(schedule: Pick<Schedule, "paused" | "nextFireAt">, now: number = Date.now()): string {
  if (schedule.paused || !schedule.nextFireAt) return "paused";
  return new Date(schedule.nextFireAt).getTime() <= now ? "due now" : formatRelative(schedule.nextFireAt, now);
}

/** The overlap policy in words; one not offered here (SIGNAL_EXISTING…) by its name. */
export function overlapWords(policy: RunConflict): string {
  return OVERLAPS.find((o) => o.value === policy)?.label ?? policy;
}
