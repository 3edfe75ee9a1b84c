import { type KeyboardEvent, useRef } from "react";
import { navigate } from "../../app/router";

export interface TabItem<T extends string> {
  id: T;
  label: string;
  href: string;
  count?: number | string | null;
}

/**
 * A WAI-ARIA tab list whose tabs are links (each tab is an address): arrows, Home and End move
 * between tabs, Enter or a click opens one. The panel is `tabpanel-<id>`, labelled by its tab.
 */
export function Tabs<T extends string>({ label, items, current }: { label: string; items: TabItem<T>[]; current: T }) {
  const refs = useRef<(HTMLAnchorElement | null)[]>([]);
  const onKey = (event: KeyboardEvent<HTMLAnchorElement>, index: number) => {
    const last = items.length - 1;
    const to =
      event.key === "ArrowRight" ? (index === last ? 0 : index + 1)
      : event.key === "ArrowLeft" ? (index === 0 ? last : index - 1)
      : event.key === "Home" ? 0
      : event.key === "End" ? last
      : null;
    if (to === null) return;
    event.preventDefault();
    const item = items[to]!;
    navigate(item.href, { replace: true, keepScroll: true });
    refs.current[to]?.focus();
  };
  return (
    <div className="tabs" role="tablist" aria-label={label}>
      {items.map((item, i) => {
        const selected = item.id === current;
        return (
          <a
            key={item.id}
            ref={(el) => {
              refs.current[i] = el;
            }}
            role="tab"
            id={`tab-${item.id}`}
            href={item.href}
            aria-selected={selected}
            aria-controls={selected ? `tabpanel-${item.id}` : undefined}
            tabIndex={selected ? 0 : -1}
            className={selected ? "tab tab-selected" : "tab"}
            onClick={(event) => {
              if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
              event.preventDefault();
              navigate(item.href, { replace: true, keepScroll: true });
            }}
            onKeyDown={(event) => onKey(event, i)}
          >
            {item.label}
            {item.count != null && <span className="tab-count"> {item.count}</span>}
          </a>
        );
      })}
    </div>
  );
}
