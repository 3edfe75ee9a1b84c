import { ApolloProvider, useQuery } from "@apollo/client/react";
import { useEffect, useState, useSyncExternalStore } from "react";
import { createClient } from "../api/client";
import { AWAITING_COUNT } from "../api/documents/runs";
import { VIEWER } from "../api/documents/viewer";
import { awaitsPerson } from "../ui/waiting";
import { getInvitation, onInvitation } from "../auth/invitation";
import { getPendingSwitch, getToken, markTokenAccepted, onPendingSwitch, onTokenChange, setToken } from "../auth/token";
import { AcceptInvitation } from "../screens/AcceptInvitation";
import { Agents } from "../screens/Agents";
import { AwaitingInput } from "../screens/AwaitingInput";
import { Budgets } from "../screens/Budgets";
import { Invitations } from "../screens/Invitations";
import { Members } from "../screens/Members";
import { Schedules } from "../screens/Schedules";
import { Queue } from "../screens/Queue";
import { Replays } from "../screens/Replays";
import { RunDetail } from "../screens/run/RunDetail";
import { RunsList } from "../screens/RunsList";
import { SignIn } from "../screens/SignIn";
import { StartRun } from "../screens/StartRun";
import { SwitchTenant } from "../screens/SwitchTenant";
import { Usage } from "../screens/Usage";
import { Webhooks } from "../screens/Webhooks";
import { ConnectionIndicator } from "../ui/ConnectionIndicator";
import { applyTheme, listenForShortcuts, loadTheme, nextTheme, type Theme } from "../ui/shell";
import { RealtimeProvider } from "./realtime";
import { Link, matchRoute, navigate, useLocation } from "./router";

function useToken(): string | null {
  return useSyncExternalStore(onTokenChange, getToken);
}

export function App() {
  const token = useToken();
  const pending = useSyncExternalStore(onPendingSwitch, getPendingSwitch);
  const invitation = useSyncExternalStore(onInvitation, getInvitation);
  if (invitation) return <AcceptInvitation link={invitation} />;
  if (!token) return <SignIn />;
  if (pending) return <SwitchTenant current={token} next={pending} />;
  // A new token is a new person or tenant: a fresh cache and a fresh socket.
  return <SignedIn key={token} />;
}

function SignedIn() {
  const [client] = useState(createClient);
  useEffect(() => () => client.stop(), [client]);
  return (
    <ApolloProvider client={client}>
      <RealtimeProvider client={client}>
        <Shell />
      </RealtimeProvider>
    </ApolloProvider>
  );
}

const NAV = [
  { to: "/runs", label: "Runs", match: ["runs", "run"] },
  { to: "/runs/new", label: "New run", match: ["startRun"] },
  { to: "/awaiting", label: "Awaiting input", match: ["awaiting"] },
  { to: "/queue", label: "Queue", match: ["queue"] },
  { to: "/replays", label: "Replays", match: ["replays"] },
  { to: "/agents", label: "Agents", match: ["agents"] },
  { to: "/schedules", label: "Schedules", match: ["schedules"] },
  { to: "/budgets", label: "Budgets", match: ["budgets"] },
  { to: "/webhooks", label: "Webhooks", match: ["webhooks"] },
  { to: "/members", label: "Members", match: ["members", "invitations"] },
  { to: "/usage", label: "Usage", match: ["usage"] },
];

function Shell() {
  const { path } = useLocation();
  const route = matchRoute(path);
  const { data } = useQuery(VIEWER);
  const viewer = data?.viewer;
  useEffect(() => {
    if (viewer) markTokenAccepted();
  }, [viewer]);
  useEffect(
    () =>
      listenForShortcuts((shortcut) => {
        if (shortcut === "runs") {
          navigate("/runs");
          return;
        }
        const focus = () => document.getElementById("run-search")?.focus();
        if (document.getElementById("run-search")) focus();
        else {
          navigate("/runs");
          setTimeout(focus, 0);
        }
      }),
    [],
  );

  return (
    <div className="shell">
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="topbar">
        <Link to="/runs" className="brand">
          <span className="logo" aria-hidden="true">◐</span> Outlive
        </Link>
        <nav aria-label="Main">
          <ul>
            {NAV.map((item) => (
              <li key={item.to}>
                <Link to={item.to} aria-current={item.match.includes(route.name) ? "page" : undefined}>
                  {item.label}
                  {item.to === "/awaiting" && <AwaitingCount />}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div className="topbar-end">
          <ConnectionIndicator />
          {viewer && (
            <span className="who" title={viewer.user.email}>
              <span className="tenant" data-testid="tenant">{viewer.tenant.slug}</span>
              <span className="muted small"> {viewer.user.email}</span>
            </span>
          )}
          <ThemeToggle />
          <button type="button" className="quiet" onClick={() => setToken(null)}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        <Screen route={route} />
      </main>
    </div>
  );
}

const WAITING: ["WAITING"] = ["WAITING"];

/**
 * The nav's count of runs awaiting a person (a signal, or a hold: a budget, a pause, a code
 * version); none: nothing.
 */
function AwaitingCount() {
  const { data } = useQuery(AWAITING_COUNT, { variables: { status: WAITING } });
  const count = (data?.runs.edges ?? []).filter((e) => awaitsPerson(e.node)).length;
  if (!count) return null;
  const more = data?.runs.pageInfo.hasNextPage ? "+" : "";
  return (
    <span className="nav-count" data-testid="awaiting-count">
      <span className="visually-hidden">: </span>
      {count}
      {more}
      <span className="visually-hidden"> waiting</span>
    </span>
  );
}

const THEME_WORDS: Record<Theme, string> = { system: "Theme: system", light: "Theme: light", dark: "Theme: dark" };

/** Follows the OS until the person picks light or dark; the choice is kept. */
function ThemeToggle() {
  const [theme, setTheme] = useState<Theme>(loadTheme);
  useEffect(() => applyTheme(theme), [theme]);
  return (
    <button
      type="button"
      className="quiet theme-toggle"
      aria-label={`${THEME_WORDS[theme]} (change)`}
      title="System, light or dark"
      onClick={() => setTheme(nextTheme)}
    >
      {theme === "dark" ? "☾" : theme === "light" ? "☀" : "◐"} <span className="small">{theme}</span>
    </button>
  );
}

function Screen({ route }: { route: ReturnType<typeof matchRoute> }) {
  switch (route.name) {
    case "runs":
      return <RunsList />;
    case "startRun":
      return <StartRun />;
    case "run":
      return <RunDetail key={route.id} id={route.id} />;
    case "webhooks":
      return <Webhooks />;
    case "invitations":
      return <Invitations />;
    case "usage":
      return <Usage />;
    case "replays":
      return <Replays />;
    case "agents":
      return <Agents />;
    case "queue":
      return <Queue />;
    case "awaiting":
      return <AwaitingInput />;
    case "budgets":
      return <Budgets />;
    case "members":
      return <Members />;
    case "schedules":
      return <Schedules />;

    case "notFound":
      return (
        <section>
          <h1>Not found</h1>
          <p>
            Nothing here. <Link to="/runs">Go to the runs</Link>.
          </p>
        </section>
      );
  }
}
