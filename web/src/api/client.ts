/**
 * The Apollo client: HTTP only (/graphql with the bearer token). The socket does not carry data;
 * it only tells this client which active queries to ask again (realtime/refresh.ts).
 *
 * Documents travel as Automatic Persisted Queries: a query is a GET with the sha256 of its text
 * (the server parses and validates each document once; the URL is short); the first time a server
 * process sees a hash it answers PersistedQueryNotFound and the link sends the text once.
 */

import { ApolloClient, ApolloLink, HttpLink, InMemoryCache } from "@apollo/client";
import { CombinedGraphQLErrors, ServerError } from "@apollo/client/errors";
import { SetContextLink } from "@apollo/client/link/context";
import { ErrorLink } from "@apollo/client/link/error";
import { PersistedQueryLink } from "@apollo/client/link/persisted-queries";
import { getToken, refusalMessage, signOut } from "../auth/token";
import type { RunEvent, RunStep } from "./types";

/** Timeline events are immutable and numbered: pages merge by `seq`, in order, without gaps. */
export function mergeEvents<T extends Pick<RunEvent, "seq">>(
  existing: readonly T[] | undefined,
  incoming: readonly T[],
  readField?: (field: string, from: unknown) => unknown,
): T[] {
  const seqOf = (e: T) => (readField ? (readField("seq", e) as number) : e.seq);
  const bySeq = new Map<number, T>();
  for (const e of existing ?? []) bySeq.set(seqOf(e), e);
  for (const e of incoming) bySeq.set(seqOf(e), e);
  return [...bySeq.entries()].sort((a, b) => a[0] - b[0]).map(([, e]) => e);
}

export function createCache(): InMemoryCache {
  return new InMemoryCache({
    typePolicies: {
      Query: {
        fields: {
          // A run already in the cache (from the list, or the startRun answer) shows at once.
          run: {
            read(existing, { args, toReference }) {
              if (existing !== undefined || typeof args?.["id"] !== "string") return existing;
              return toReference({ __typename: "Run", id: args["id"] });
            },
          },
          viewer: { merge: true },
        },
      },
      Run: {
        fields: {
          events: {
            keyArgs: false,
            merge(existing: readonly RunEvent[] | undefined, incoming: readonly RunEvent[]) {
              return mergeEvents(existing, incoming);
            },
          },
          // A run's completed steps, like its events: immutable, numbered, merged by seq.
          steps: {
            keyArgs: false,
            merge(existing: readonly RunStep[] | undefined, incoming: readonly RunStep[]) {
              return mergeEvents(existing, incoming);
            },
          },
        },
      },
      Viewer: { keyFields: false },
      Agent: { keyFields: ["name"] },
      UsageDay: { keyFields: false },
      RunEvent: { keyFields: false },
      RunStep: { keyFields: false },
    },
  });
}

/** Whether an error says the token is missing, wrong or revoked. */
export function isUnauthenticated(error: unknown): boolean {
  if (ServerError.is(error) && error.statusCode === 401) return true;
  return (
    CombinedGraphQLErrors.is(error) &&
    error.errors.some((e) => e.extensions?.["code"] === "UNAUTHENTICATED")
  );
}

/** The hex sha256 of a document's text (Web Crypto). */
export async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Persisted queries where Web Crypto is there (a secure context: https, localhost). */
export function persistedQueries(): ApolloLink | null {
  if (typeof crypto === "undefined" || !crypto.subtle) return null;
  return new PersistedQueryLink({ sha256: sha256Hex, useGETForHashedQueries: true });
}

export function createClient(): ApolloClient {
  const auth = new SetContextLink((prev) => {
    const token = getToken();
    return token ? { headers: { ...prev["headers"], authorization: `Bearer ${token}` } } : {};
  });
  const signOutOnRefusal = new ErrorLink(({ error }) => {
    if (isUnauthenticated(error) && getToken()) {
      signOut(refusalMessage());
    }
  });
  const http = new HttpLink({ uri: "/graphql", credentials: "same-origin" });
  const persisted = persistedQueries();
  return new ApolloClient({
    link: ApolloLink.from(
      persisted ? [signOutOnRefusal, auth, persisted, http] : [signOutOnRefusal, auth, http],
    ),
    cache: createCache(),
    defaultOptions: {
      // Show what the cache has at once and ask the API again: every navigation re-queries, so
      // the app stays right with the socket down.
      watchQuery: { fetchPolicy: "cache-and-network", nextFetchPolicy: "cache-first" },
    },
  });
}
