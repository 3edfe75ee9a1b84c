/** The contract's shapes (CONTRACT.md §4), as the app's documents select them. */

export type RunStatus = "QUEUED" | "RUNNING" | "SUCCEEDED" | "FAILED" | "CANCELLED";
export const RUN_STATUSES: readonly RunStatus[] = [
  "QUEUED",
  "RUNNING",
  "SUCCEEDED",
  "FAILED",
  "CANCELLED",
];
export const ACTIVE_STATUSES: readonly RunStatus[] = ["QUEUED", "RUNNING"];

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface Run {
  __typename?: "Run";
  id: string;
  agent: string;
  status: RunStatus;
  attempt: number;
  input: Json;
  output: Json | null;
  error: string | null;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  cancelRequestedAt: string | null;
}

export interface RunEvent {
  seq: number;
  type: string;
  data: Json;
  at: string;
}

export interface Agent {
  name: string;
  description: string;
  inputSchema: Json;
}

export interface Viewer {
  user: { id: string; email: string };
  tenant: { id: string; slug: string; name: string };
}

export type DeliveryStatus = "PENDING" | "DELIVERED" | "FAILED";

export interface WebhookDelivery {
  id: string;
  eventType: string;
  status: DeliveryStatus;
  attempts: number;
  responseStatus: number | null;
  lastError: string | null;
  createdAt: string;
  deliveredAt: string | null;
}

export interface WebhookEndpoint {
  id: string;
  url: string;
  events: string[];
  createdAt: string;
  deliveries: WebhookDelivery[];
}

export type InvitationStatus = "PENDING" | "SENT" | "FAILED" | "EXPIRED";

export interface Invitation {
  id: string;
  email: string;
  status: InvitationStatus;
  createdAt: string;
  sentAt: string | null;
}

export interface UsageDay {
  day: string;
  agent: string;
  status: RunStatus;
  count: number;
}
