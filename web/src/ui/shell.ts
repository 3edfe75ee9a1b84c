/**
 * The theme (follow the OS, or a choice kept in localStorage) and the keyboard shortcuts:
 * `/` to search runs, `g` then `r` for the runs list.
 */

export type Theme = "system" | "light" | "dark";
export const THEME_KEY = "outlive.theme";
export const THEMES: readonly Theme[] = ["system", "light", "dark"];

export function loadTheme(): Theme {
  try {
    const value = window.localStorage.getItem(THEME_KEY);
    return THEMES.includes(value as Theme) ? (value as Theme) : "system";
  } catch {
    return "system";
  }
}

export function applyTheme(theme: Theme): void {
  const root = document.documentElement;
  if (theme === "system") delete root.dataset["theme"];
  else root.dataset["theme"] = theme;
  try {
    if (theme === "system") window.localStorage.removeItem(THEME_KEY);
    else window.localStorage.setItem(THEME_KEY, theme);
  } catch {
    // storage disabled: the choice lasts as long as the page
  }
}

export function nextTheme(theme: Theme): Theme {
  return THEMES[(THEMES.indexOf(theme) + 1) % THEMES.length]!;
}

const NOT_TYPED = new Set(["checkbox", "radio", "button", "submit", "reset", "range", "color", "file"]);

/** Whether a key press belongs to a field the person is typing in (a checkbox is not one). */
function typing(target: EventTarget | null): boolean {
  if (!(target instanceof HTMLElement)) return false;
  if (target instanceof HTMLInputElement) return !NOT_TYPED.has(target.type);
  return target.isContentEditable || ["TEXTAREA", "SELECT"].includes(target.tagName);
}

export type Shortcut = "search" | "runs";

/** Reads key presses as shortcuts: "/" is search; "g" then "r" (within a second) is runs. */
export class ShortcutReader {
  private gAt = -Infinity;

  read(key: string, now: number, inField: boolean, modified: boolean): Shortcut | null {
    if (inField || modified) return null;
    if (key === "/") return "search";
    if (key === "g") {
      this.gAt = now;
      return null;
    }
    if (key === "r" && now - this.gAt < 1000) {
      this.gAt = -Infinity;
      return "runs";
    }
    this.gAt = -Infinity;
    return null;
  }
}

export function listenForShortcuts(on: (shortcut: Shortcut) => void): () => void {
  const reader = new ShortcutReader();
  const handle = (event: KeyboardEvent) => {
    const shortcut = reader.read(
      event.key,
      Date.now(),
      typing(event.target),
      event.ctrlKey || event.metaKey || event.altKey,
    );
    if (shortcut) {
      event.preventDefault();
      on(shortcut);
    }
  };
  window.addEventListener("keydown", handle);
  return () => window.removeEventListener("keydown", handle);
}
