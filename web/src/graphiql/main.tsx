/**
 * GraphiQL at GET /graphql, from the package's own files: no CDN, Monaco's workers bundled by
 * Vite. The token is the one the app keeps (auth/token.ts), shown in the headers editor.
 */

import "graphiql/setup-workers/vite";
import "graphiql/style.css";
import { GraphiQL } from "graphiql";
import { createRoot } from "react-dom/client";
import { getToken } from "../auth/token";
import { createFetcher } from "./fetcher";

const DEFAULT_QUERY = `# Outlive's GraphQL API. The headers tab carries your token from the web app.
# Run a query with Ctrl-Enter. To watch nudges, run the subscription below and
# start a run from the web app or another tab.

query Viewer {
  viewer {
    tenant { slug name }
    user { email }
  }
  runs(first: 5) {
    edges { node { id agent status createdAt } }
  }
}

subscription Nudges {
  nudges { type tenantId at id }
}
`;

/** `#query=<document>` opens GraphiQL on that document (links from docs and tests). */
function queryFromHash(): string | undefined {
  const value = new URLSearchParams(window.location.hash.replace(/^#/, "")).get("query");
  return value ?? undefined;
}

const token = getToken();
const fetcher = createFetcher(window.location, getToken);
const root = document.getElementById("graphiql")!;
root.removeAttribute("aria-busy");
root.textContent = "";
const initialQuery = queryFromHash();

createRoot(root).render(
  <GraphiQL
    fetcher={fetcher}
    defaultQuery={DEFAULT_QUERY}
    {...(initialQuery !== undefined ? { initialQuery } : {})}
    initialHeaders={token ? JSON.stringify({ Authorization: `Bearer ${token}` }, null, 2) : "{}"}
    defaultHeaders={token ? JSON.stringify({ Authorization: `Bearer ${token}` }, null, 2) : undefined}
    shouldPersistHeaders={false}
    defaultEditorToolsVisibility={token ? false : "headers"}
  >
    <GraphiQL.Logo>
      <a href="/" style={{ color: "inherit", textDecoration: "none" }}>
        Outlive
      </a>{" "}
      · Graph<em>i</em>QL
    </GraphiQL.Logo>
  </GraphiQL>,
);
