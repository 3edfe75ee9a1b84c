/** Bulk replays and bulk cancels (replays.graphql, typed by graphql-codegen). */
export {
  CancelRunReplayDocument as CANCEL_RUN_REPLAY,
  CancelRunsCountDocument as CANCEL_RUNS_COUNT,
  CancelRunsDocument as CANCEL_RUNS,
  ReplayRunsCountDocument as REPLAY_RUNS_COUNT,
  ReplayRunsDocument as REPLAY_RUNS,
  RunReplayFieldsFragmentDoc as RUN_REPLAY_FIELDS,
  RunReplaysDocument as RUN_REPLAYS,
} from "../generated";
export type { RunReplayFieldsFragment as RunReplay } from "../generated";

/** How many replays the screen lists (newest first). */
export const REPLAYS_SHOWN = 20;
