/**
 * The run page's tabs, named in the address (`/runs/<id>?tab=steps`) so that a tab can be
 * bookmarked, reloaded and linked. A tab another part of the app adds (Children, Output) is one
 * more entry in RUN_TABS and one more case in RunDetail's switch.
 */

export const RUN_TABS = [
  { id: "overview", label: "Overview" },
  { id: "steps", label: "Steps" },
  { id: "waterfall", label: "Waterfall" },
  { id: "events", label: "Events" },
  { id: "tree", label: "Tree" }, // offered for a run with a parent or children (RunTabs)
] as const;

export type RunTab = (typeof RUN_TABS)[number]["id"];

/** The tab the address names; Overview for none or one this app does not know. */
export function tabOf(params: URLSearchParams): RunTab {
  const asked = params.get("tab");
  return RUN_TABS.find((t) => t.id === asked)?.id ?? "overview";
}

/** The address of `tab` on the run page at `path`, keeping the other parameters. */
export function tabHref(path: string, params: URLSearchParams, tab: RunTab): string {
  const next = new URLSearchParams(params);
  if (tab === "overview") next.delete("tab");
  else next.set("tab", tab);
  const query = next.toString();
  return query ? `${path}?${query}` : path;
}
