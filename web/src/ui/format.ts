/** Dates and durations as a person reads them, in their own time zone. */

export function formatTime(iso: string | null | undefined): string {
  if (!iso) return "—";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const today = new Date();
  const sameDay = date.toDateString() === today.toDateString();
  return sameDay
    ? date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" })
    : date.toLocaleString(undefined, {
        year: "numeric",
        month: "short",
        day: "numeric",
        hour: "2-digit",
        minute: "2-digit",
      });
}

export function formatDuration(startIso: string | null, endIso: string | null): string {
  if (!startIso || !endIso) return "—";
  const ms = new Date(endIso).getTime() - new Date(startIso).getTime();
  if (!Number.isFinite(ms) || ms < 0) return "—";
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - m * 60)} s`;
}

export function shortId(id: string): string {
  return id.slice(0, 8);
}

export function compactJson(value: unknown): string {
  return JSON.stringify(value) ?? "null";
}

/** "just now", "3 min ago", "in 2 h", "5 d ago": relative to `now`. */
export function formatRelative(iso: string | null | undefined, now: number = Date.now()): string {
  if (!iso) return "—";
  const t = new Date(iso).getTime();
  if (Number.isNaN(t)) return iso;
  const diff = t - now;
  const abs = Math.abs(diff);
  const say = (n: number, unit: string) => (diff < 0 ? `${n} ${unit} ago` : `in ${n} ${unit}`);
  if (abs < 1_000) return "just now";
  if (abs < 60_000) return say(Math.round(abs / 1000), "s");
  if (abs < 3_600_000) return say(Math.round(abs / 60_000), "min");
  if (abs < 86_400_000) return say(Math.round(abs / 3_600_000), "h");
  return say(Math.round(abs / 86_400_000), "d");
}

/** The person's time zone, e.g. "Europe/Paris" (or "UTC"). */
export function timeZone(): string {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
}

/** Date, time to the second and the zone's short name: what a hover shows. */
export function formatAbsolute(iso: string | null | undefined): string {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  return date.toLocaleString(undefined, {
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    timeZoneName: "short",
  });
}

/** An input preview: the run's input as one line of JSON, cut at `max` characters. */
export function inputPreview(input: unknown, max = 120): string {
  const text = compactJson(input);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
