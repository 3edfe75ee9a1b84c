/**
 * A small router over the History API: the server answers every unknown path with index.html, so
 * /runs/<id> is a real address that can be bookmarked and reloaded.
 */

import { type AnchorHTMLAttributes, type MouseEvent, useSyncExternalStore } from "react";

const listeners = new Set<() => void>();

function notify(): void {
  for (const l of listeners) l();
}

window.addEventListener("popstate", notify);

function subscribe(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

const snapshot = () => window.location.pathname + window.location.search;

export function useLocationKey(): string {
  return useSyncExternalStore(subscribe, snapshot);
}

export function useLocation(): { path: string; params: URLSearchParams } {
  const key = useLocationKey();
  const url = new URL(key, window.location.origin);
  return { path: url.pathname, params: url.searchParams };
}

export function navigate(to: string, options: { replace?: boolean; keepScroll?: boolean } = {}): void {
  if (to === snapshot()) return;
  if (options.replace) window.history.replaceState(null, "", to);
  else window.history.pushState(null, "", to);
  if (!options.keepScroll) window.scrollTo({ top: 0 });
  notify();
}

type LinkProps = AnchorHTMLAttributes<HTMLAnchorElement> & { to: string };

export function Link({ to, onClick, ...rest }: LinkProps) {
  const handle = (event: MouseEvent<HTMLAnchorElement>) => {
    onClick?.(event);
    if (
      event.defaultPrevented ||
      event.button !== 0 ||
      event.metaKey ||
      event.ctrlKey ||
      event.shiftKey ||
      event.altKey
    ) {
      return;
    }
    event.preventDefault();
    navigate(to);
  };
  return <a href={to} onClick={handle} {...rest} />;
}

export type Route =
  | { name: "runs" }
  | { name: "startRun" }
  | { name: "run"; id: string }
  | { name: "webhooks" }
  | { name: "invitations" }
  | { name: "usage" }
  | { name: "replays" }
  | { name: "agents" }
  | { name: "queue" }
  | { name: "awaiting" }
  | { name: "budgets" }
  | { name: "members" }
  | { name: "schedules" }
  | { name: "notFound" };

export function matchRoute(path: string): Route {
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts.length === 0 || (parts.length === 1 && parts[0] === "runs")) return { name: "runs" };
  if (parts[0] === "runs" && parts.length === 2) {
    return parts[1] === "new" ? { name: "startRun" } : { name: "run", id: parts[1]! };
  }
  if (parts.length === 1 && parts[0] === "webhooks") return { name: "webhooks" };
  if (parts.length === 1 && parts[0] === "invitations") return { name: "invitations" };
  if (parts.length === 1 && parts[0] === "usage") return { name: "usage" };
  if (parts.length === 1 && parts[0] === "replays") return { name: "replays" };
  if (parts.length === 1 && parts[0] === "agents") return { name: "agents" };
  if (parts.length === 1 && parts[0] === "queue") return { name: "queue" };
  if (parts.length === 1 && parts[0] === "awaiting") return { name: "awaiting" };
  if (parts.length === 1 && parts[0] === "budgets") return { name: "budgets" };
  if (parts.length === 1 && parts[0] === "members") return { name: "members" };
  if (parts.length === 1 && parts[0] === "schedules") return { name: "schedules" };
  return { name: "notFound" };
}
