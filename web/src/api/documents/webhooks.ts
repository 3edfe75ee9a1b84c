/** Webhooks (webhooks.graphql, typed by graphql-codegen). */
export {
  CreateWebhookEndpointDocument as CREATE_WEBHOOK_ENDPOINT,
  DeleteWebhookEndpointDocument as DELETE_WEBHOOK_ENDPOINT,
  RedeliverWebhookDocument as REDELIVER_WEBHOOK,
  WebhookEndpointFieldsFragmentDoc as ENDPOINT_FIELDS,
  WebhookEndpointsDocument as WEBHOOK_ENDPOINTS,
} from "../generated";

export const WEBHOOK_EVENTS = ["run.succeeded", "run.failed", "run.cancelled"] as const;
