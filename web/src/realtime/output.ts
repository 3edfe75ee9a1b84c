/**
 * A run's partial output (`runOutput`, contract §4.1): display, never state. The run's journal
 * (its steps' recorded results) is the truth the live text previews.
 *
 * - Resume: a follow keeps the cursor of the last chunk it handed on, and its subscription's
 *   variables are read again each time graphql-ws (re)sends the subscription, so a socket that
 *   drops and reconnects resumes with `after` = that cursor: nothing lost, nothing twice.
 * - A chunk at or before that cursor (one sent again) is dropped: the cursor is the chunk's Redis
 *   stream id, `<ms>-<seq>` (docs/streams.md), ordered by its two numbers.
 * - Segments: a stream's text since its last `done` is the open segment, its step's live reply.
 *   `done` ends it (the step completed, or failed): it is then shown, ended, until its step's
 *   recorded output is in (`clearEnded`), or the next segment of its stream begins.
 * - Resets (round five): a chunk with `reset` says the stream's open segment was abandoned (its
 *   worker died mid-reply, or the call was made again): what it showed is dropped, so the next
 *   attempt's reply is shown once, not after the dead one's.
 * - Kinds (round five): `text` and `output` (the structured output as it is written) are shown;
 *   `tool_call` and `tool_result` lines are not part of the reply's text.
 */

export const RUN_OUTPUT_SUBSCRIPTION =
  "subscription RunOutput($id: ID!, $after: String) { runOutput(id: $id, after: $after) { runId stream cursor text done kind attempt reset } }";

export interface OutputChunk {
  runId: string;
  stream: string;
  cursor: string;
  text: string;
  done: boolean;
  /** "text", "tool_call", "tool_result" or "output"; absent from a server before round five. */
  kind?: string;
  attempt?: number;
  reset?: boolean;
}

/** The kinds of chunk whose text is the reply shown. */
const SHOWN_KINDS = new Set(["text", "output"]);

export interface OutputSink {
  next: (chunk: OutputChunk) => void;
  /** The run settled and every chunk was sent. */
  complete: () => void;
  /** The server refused (another tenant's run, a server without `runOutput`). */
  error: (error: unknown) => void;
}

const CURSOR = /^(\d+)-(\d+)$/;

/** When Redis stored the chunk (ms since the epoch), read from its cursor; null if unreadable. */
export function cursorMs(cursor: string): number | null {
  const m = CURSOR.exec(cursor);
  return m ? Number(m[1]) : null;
}

/** Negative, 0 or positive as `a` comes before, is, or comes after `b`; null when unreadable. */
export function compareCursors(a: string, b: string): number | null {
  const x = CURSOR.exec(a);
  const y = CURSOR.exec(b);
  if (!x || !y) return null;
  return Number(x[1]) - Number(y[1]) || Number(x[2]) - Number(y[2]);
}

/** One reader of one run's output, across reconnects (see the module's notes). */
export class OutputFollow {
  cursor: string | null = null;
  finished = false;

  constructor(
    readonly runId: string,
    private readonly sink: OutputSink,
  ) {}

  /** The subscription's payload; graphql-ws serializes it on each (re)send. */
  get payload(): { query: string; readonly variables: { id: string; after: string | null } } {
    const follow = this;
    return {
      query: RUN_OUTPUT_SUBSCRIPTION,
      get variables() {
        return { id: follow.runId, after: follow.cursor };
      },
    };
  }

  take(chunk: OutputChunk): void {
    if (this.finished) return;
    if (this.cursor !== null && (compareCursors(chunk.cursor, this.cursor) ?? 1) <= 0) return;
    this.cursor = chunk.cursor;
    this.sink.next(chunk);
  }

  complete(): void {
    if (this.finished) return;
    this.finished = true;
    this.sink.complete();
  }

  fail(error: unknown): void {
    if (this.finished) return;
    this.finished = true;
    this.sink.error(error);
  }
}

export interface LiveOutput {
  /** Per stream: the text written since its last `done` (the step in progress). */
  open: Readonly<Record<string, string>>;
  /** Per stream: the segment that ended last, with the count of endings when it did. */
  ended: Readonly<Record<string, { text: string; ending: number }>>;
  /** Segments ended so far. */
  endings: number;
  /** The cursor of the last chunk applied. */
  cursor: string | null;
}

export const NO_OUTPUT: LiveOutput = { open: {}, ended: {}, endings: 0, cursor: null };

export function applyChunk(state: LiveOutput, chunk: OutputChunk): LiveOutput {
  const { stream } = chunk;
  const open = { ...state.open };
  const ended = { ...state.ended };
  if (chunk.reset) {
    delete open[stream]; // the abandoned segment: what it showed is dropped
    delete ended[stream];
    return { open, ended, endings: state.endings, cursor: chunk.cursor };
  }
  const shown = SHOWN_KINDS.has(chunk.kind ?? "text") ? chunk.text : "";
  const text = (open[stream] ?? "") + shown;
  if (chunk.done) {
    delete open[stream];
    const endings = state.endings + 1;
    if (text) ended[stream] = { text, ending: endings };
    return { open, ended, endings, cursor: chunk.cursor };
  }
  if (shown) delete ended[stream]; // a new segment: the last one's step is recorded
  if (text) open[stream] = text;
  return { open, ended, endings: state.endings, cursor: chunk.cursor };
}

/** Drops the segments that ended at or before `ending`: their steps' outputs are in. */
export function clearEnded(state: LiveOutput, ending: number): LiveOutput {
  const ended = Object.fromEntries(Object.entries(state.ended).filter(([, e]) => e.ending > ending));
  return { ...state, ended };
}

/** What to show under the step in progress: each stream's open text, or its ended text. */
export interface LiveText {
  stream: string;
  text: string;
  /** Its stream ended (its step completed or failed): the recorded output is on its way. */
  ended: boolean;
}

export function liveTexts(state: LiveOutput): LiveText[] {
  const streams = new Set([...Object.keys(state.ended), ...Object.keys(state.open)]);
  return [...streams].sort().flatMap((stream): LiveText[] => {
    const open = state.open[stream];
    if (open) return [{ stream, text: open, ended: false }];
    const ended = state.ended[stream];
    return ended ? [{ stream, text: ended.text, ended: true }] : [];
  });
}
