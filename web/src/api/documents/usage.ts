import type { TypedDocumentNode } from "@apollo/client";
import { gql } from "@apollo/client";
import type { UsageDay } from "../types";

/** Usage (contract §4); apart from the runs documents for the same reason as webhooks. */

export const USAGE: TypedDocumentNode<{ usage: UsageDay[] }, { days: number }> = gql`
  query Usage($days: Int!) {
    usage(days: $days) {
      day
      agent
      status
      count
    }
  }
`;
