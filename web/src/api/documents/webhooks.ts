import type { TypedDocumentNode } from "@apollo/client";
import { gql } from "@apollo/client";
import type { WebhookEndpoint } from "../types";

/**
 * Webhooks (contract §4 and §8). Kept apart from the runs documents: a server that does not have
 * these fields yet fails these documents only, never the runs screens.
 */

export const WEBHOOK_EVENTS = ["run.succeeded", "run.failed", "run.cancelled"] as const;

const ENDPOINT_FIELDS = gql`
  fragment WebhookEndpointFields on WebhookEndpoint {
    id
    url
    events
    createdAt
    deliveries(first: 20) {
      id
      eventType
      status
      attempts
      responseStatus
      lastError
      createdAt
      deliveredAt
    }
  }
`;

export const WEBHOOK_ENDPOINTS: TypedDocumentNode<
  { webhookEndpoints: WebhookEndpoint[] },
  Record<string, never>
> = gql`
  query WebhookEndpoints {
    webhookEndpoints {
      ...WebhookEndpointFields
    }
  }
  ${ENDPOINT_FIELDS}
`;

export const CREATE_WEBHOOK_ENDPOINT: TypedDocumentNode<
  { createWebhookEndpoint: { secret: string; endpoint: WebhookEndpoint } },
  { url: string; events: string[] | null }
> = gql`
  mutation CreateWebhookEndpoint($url: String!, $events: [String!]) {
    createWebhookEndpoint(url: $url, events: $events) {
      secret
      endpoint {
        ...WebhookEndpointFields
      }
    }
  }
  ${ENDPOINT_FIELDS}
`;

export const DELETE_WEBHOOK_ENDPOINT: TypedDocumentNode<
  { deleteWebhookEndpoint: boolean },
  { id: string }
> = gql`
  mutation DeleteWebhookEndpoint($id: ID!) {
    deleteWebhookEndpoint(id: $id)
  }
`;
