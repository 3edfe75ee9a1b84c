/**
 * The runs screens' documents, written in runs.graphql and typed by graphql-codegen from the
 * schema the server serves (src/api/generated.ts). The operation names are the query keys the
 * nudges name (realtime/invalidation.ts): Runs, RunDetail, RunTimeline, RunSteps.
 */

export {
  CancelRunDocument as CANCEL_RUN,
  KeyHolderDocument as KEY_HOLDER,
  PauseRunDocument as PAUSE_RUN,
  ResumeRunDocument as RESUME_RUN,
  RetryRunDocument as RETRY_RUN,
  RunDetailDocument as RUN_DETAIL,
  RunFieldsFragmentDoc as RUN_FIELDS,
  QueueDocument as QUEUE,
  AwaitingInputDocument as AWAITING_INPUT,
  AwaitingCountDocument as AWAITING_COUNT,
  RunsByIdPrefixDocument as RUNS_BY_ID_PREFIX,
  RunsDocument as RUNS,
  RunWhyDocument as RUN_WHY,
  RunTimelineDocument as RUN_TIMELINE,
  RunStepsDocument as RUN_STEPS,
  RunStepDetailDocument as RUN_STEP_DETAIL,
  RunsCostDocument as RUNS_COST,
  RunStepResultsDocument as RUN_STEP_RESULTS,
  SignalRunDocument as SIGNAL_RUN,
  StartRunDocument as START_RUN,
} from "../generated";
export type {
  RunDetailQuery as RunDetailData,
  RunsQuery as RunsData,
  RunsQueryVariables as RunsVars,
  RunTimelineQuery as RunTimelineData,
  RunStepsQuery as RunStepsData,
  StartRunMutation as StartRunData,
} from "../generated";

/** The most events one request asks for (the server's cap is 1000); `first:` in runs.graphql. */
export const EVENTS_PAGE = 500;

/** The most steps one request asks for; `first:` of RunSteps in runs.graphql. */
export const STEPS_PAGE = 1000;
