/** Webhooks (webhooks.graphql, typed by graphql-codegen). */
export {
  CreateWebhookEndpointDocument as CREATE_WEBHOOK_ENDPOINT,
  DeleteWebhookEndpointDocument as DELETE_WEBHOOK_ENDPOINT,
  RedeliverFailedWebhooksDocument as REDELIVER_FAILED_WEBHOOKS,
  RedeliverWebhookDocument as REDELIVER_WEBHOOK,
  RetryPendingWebhookDeliveriesDocument as RETRY_PENDING_WEBHOOK_DELIVERIES,
  RetryWebhookDeliveryDocument as RETRY_WEBHOOK_DELIVERY,
  SendTestWebhookDocument as SEND_TEST_WEBHOOK,
  WebhookDeliveryAttemptsDocument as WEBHOOK_DELIVERY_ATTEMPTS,
  WebhookEndpointDeliveriesDocument as WEBHOOK_ENDPOINT_DELIVERIES,
  WebhookEndpointFieldsFragmentDoc as ENDPOINT_FIELDS,
  WebhookEndpointsDocument as WEBHOOK_ENDPOINTS,
} from "../generated";

export const WEBHOOK_EVENTS = ["run.succeeded", "run.failed", "run.cancelled"] as const;
