/**
 * GraphiQL's fetcher: queries and mutations over HTTP, subscriptions over graphql-ws, both with the
 * Authorization header of the headers editor, which starts out as the app's own token.
 */

import type { Fetcher, FetcherOpts, FetcherParams } from "@graphiql/toolkit";
import { createGraphiQLFetcher } from "@graphiql/toolkit";
import { type ExecutionResult, getOperationAST } from "graphql";
import { createClient } from "graphql-ws";

/** The header editor's value for Authorization, whatever its case; else the stored token. */
export function authorization(headers: Record<string, unknown> | undefined, token: string | null): string | null {
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (name.toLowerCase() === "authorization" && typeof value === "string" && value.trim()) return value;
  }
  return token ? `Bearer ${token}` : null;
}

function isSubscription(opts: FetcherOpts | undefined, operationName: string | null | undefined): boolean {
  if (!opts?.documentAST) return false;
  return getOperationAST(opts.documentAST, operationName ?? undefined)?.operation === "subscription";
}

function describeClose(error: unknown): Error {
  if (typeof error === "object" && error !== null && "code" in error) {
    const { code, reason } = error as { code: number; reason?: string };
    const why = code === 4403 ? "the token was refused" : reason || "the socket closed";
    return new Error(`Subscription ended: ${why} (close ${code})`);
  }
  return error instanceof Error ? error : new Error("Subscription failed");
}

async function* subscribe(url: string, params: FetcherParams, auth: string | null) {
  const client = createClient({
    url,
    connectionParams: auth ? { authorization: auth } : {},
    retryAttempts: 0,
    lazy: true,
  });
  try {
    yield* client.iterate({
      query: params.query,
      operationName: params.operationName ?? null,
      variables: (params.variables as Record<string, unknown> | undefined) ?? {},
    });
  } catch (error) {
    throw describeClose(error);
  } finally {
    await client.dispose();
  }
}

export function createFetcher(origin: Location, token: () => string | null): Fetcher {
  const http = createGraphiQLFetcher({ url: "/graphql", enableIncrementalDelivery: false });
  const ws = `${origin.protocol === "https:" ? "wss:" : "ws:"}//${origin.host}/graphql`;
  return (params, opts) => {
    const editorHeaders = (opts?.headers ?? {}) as Record<string, unknown>;
    const auth = authorization(editorHeaders, token());
    if (isSubscription(opts, params.operationName)) {
      // graphql-ws yields formatted results, which is what GraphiQL shows; only the typings differ
      return subscribe(ws, params, auth) as AsyncIterable<ExecutionResult>;
    }
    const headers: Record<string, unknown> = Object.fromEntries(
      Object.entries(editorHeaders).filter(([name]) => name.toLowerCase() !== "authorization"),
    );
    if (auth) headers["Authorization"] = auth;
    return http(params, { ...opts, headers });
  };
}
