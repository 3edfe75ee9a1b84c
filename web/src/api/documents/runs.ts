import type { TypedDocumentNode } from "@apollo/client";
import { gql } from "@apollo/client";
import type { Run, RunEvent, RunStatus } from "../types";

/**
 * The runs screens' documents. The operation names are the query keys the nudges name
 * (realtime/invalidation.ts): Runs, RunDetail, RunTimeline.
 */

export const RUN_FIELDS = gql`
  fragment RunFields on Run {
    id
    agent
    status
    attempt
    input
    output
    error
    createdAt
    startedAt
    finishedAt
    cancelRequestedAt
  }
`;

export const RUNS_PAGE_SIZE = 20;

export interface RunsData {
  runs: {
    edges: { cursor: string; node: Run }[];
    pageInfo: { hasNextPage: boolean; endCursor: string | null };
  };
}
export interface RunsVars {
  first: number;
  after?: string | null;
  status?: RunStatus[] | null;
}

export const RUNS: TypedDocumentNode<RunsData, RunsVars> = gql`
  query Runs($first: Int!, $after: String, $status: [RunStatus!]) {
    runs(first: $first, after: $after, status: $status) {
      edges {
        cursor
        node {
          ...RunFields
        }
      }
      pageInfo {
        hasNextPage
        endCursor
      }
    }
  }
  ${RUN_FIELDS}
`;

export interface RunDetailData {
  run: Run | null;
}

export const RUN_DETAIL: TypedDocumentNode<RunDetailData, { id: string }> = gql`
  query RunDetail($id: ID!) {
    run(id: $id) {
      ...RunFields
    }
  }
  ${RUN_FIELDS}
`;

/** The most events one request asks for (the server's cap is 1000). */
export const EVENTS_PAGE = 500;

export interface RunTimelineData {
  run: { __typename?: "Run"; id: string; events: RunEvent[] } | null;
}

/** A page of a run's timeline: the events with seq > after (see the `events` type policy). */
export const RUN_TIMELINE: TypedDocumentNode<RunTimelineData, { id: string; after: number }> = gql`
  query RunTimeline($id: ID!, $after: Int!) {
    run(id: $id) {
      id
      events(after: $after, first: ${EVENTS_PAGE}) {
        seq
        type
        data
        at
      }
    }
  }
`;

export interface StartRunData {
  startRun: { created: boolean; run: Run };
}

export const START_RUN: TypedDocumentNode<
  StartRunData,
  { input: { agent: string; input: Record<string, unknown> } }
> = gql`
  mutation StartRun($input: StartRunInput!) {
    startRun(input: $input) {
      created
      run {
        ...RunFields
      }
    }
  }
  ${RUN_FIELDS}
`;

export const CANCEL_RUN: TypedDocumentNode<{ cancelRun: Run }, { id: string }> = gql`
  mutation CancelRun($id: ID!) {
    cancelRun(id: $id) {
      ...RunFields
    }
  }
  ${RUN_FIELDS}
`;
