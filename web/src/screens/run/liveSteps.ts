import type { ApolloClient } from "@apollo/client";
import { useApolloClient } from "@apollo/client/react";
import { useEffect, useRef, useState } from "react";
import { RUN_STEP_RESULTS, RUN_STEPS } from "../../api/documents/runs";
import type { Json } from "../../api/types";
import { useRealtime } from "../../app/realtime";
import { applyChunk, clearEnded, type LiveOutput, NO_OUTPUT } from "../../realtime/output";
import { lastStepSeq } from "../../realtime/timeline";

const NONE: ReadonlyMap<number, Json> = new Map();

export interface LiveSteps {
  output: LiveOutput;
  /** What the steps completed while the page followed the run returned (by seq). */
  results: ReadonlyMap<number, Json>;
}

/**
 * The run's live output while it runs, and the recorded outputs that replace it.
 *
 * Follows `runOutput` from the start of what is kept once `follow` is true (the run is live and
 * the steps list is loaded; `from` is its last seq), until the run settles. A stream's `done`
 * comes after its step's journal row is committed, so the steps asked for then hold that step:
 * the Steps list and the results of the steps after `from` are asked for, and once both are in
 * the ended text is cleared, as its step's row shows what the journal recorded.
 */
export function useLiveSteps(id: string, follow: boolean, from: number): LiveSteps {
  const client = useApolloClient();
  const { socket } = useRealtime();
  const [output, setOutput] = useState<LiveOutput>(NO_OUTPUT);
  const [results, setResults] = useState<ReadonlyMap<number, Json>>(new Map());
  // the run followed, and its last step when following began
  const [started, setStarted] = useState<{ id: string; from: number } | null>(null);
  useEffect(() => {
    if (started?.id === id) return;
    setStarted(follow ? { id, from } : null); // another run's page: stop following the last
  }, [follow, from, id, started]);

  const state = useRef(NO_OUTPUT);
  const known = useRef<Map<number, Json>>(new Map());
  useEffect(() => {
    if (started === null) return;
    state.current = NO_OUTPUT;
    known.current = new Map();
    setOutput(NO_OUTPUT);
    setResults(known.current);
    let stopped = false;
    const settle = async (ending: number) => {
      const after = Math.max(started.from, ...known.current.keys());
      const found = await recordedAfter(client, started.id, after).catch(() => null);
      if (stopped || found === null) return;
      for (const [seq, result] of found) known.current.set(seq, result);
      setResults(new Map(known.current));
      state.current = clearEnded(state.current, ending);
      setOutput(state.current);
    };
    const stop = socket.followOutput(started.id, {
      next: (chunk) => {
        state.current = applyChunk(state.current, chunk);
        setOutput(state.current);
        if (chunk.done) void settle(state.current.endings);
      },
      complete: () => undefined, // the run settled: what was shown stays
      error: () => undefined, // nothing to show: the steps list is the truth anyway
    });
    return () => {
      stopped = true;
      stop();
    };
  }, [client, socket, started]);

  // another run's page, in the same component: nothing of the last run's shows
  return started?.id === id ? { output, results } : { output: NO_OUTPUT, results: NONE };
}

/** Asks for the new steps (into the cache, for the list), then for what the steps after `after` returned. */
async function recordedAfter(client: ApolloClient, id: string, after: number): Promise<[number, Json][]> {
  const held = client.cache.readQuery({ query: RUN_STEPS, variables: { id, after: 0 } });
  await client.query({ query: RUN_STEPS, variables: { id, after: lastStepSeq(held) }, fetchPolicy: "network-only" });
  const { data } = await client.query({ query: RUN_STEP_RESULTS, variables: { id, after }, fetchPolicy: "no-cache" });
  return (data?.run?.steps ?? []).map((s) => [s.seq, s.result]);
}
