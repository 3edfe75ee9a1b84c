import { useEffect, useState } from "react";
import { answerPendingSwitch } from "../auth/token";
import { type Who, whoIs } from "../auth/whoami";

function describe(who: Who | undefined): string {
  if (!who) return "Checking…";
  if ("error" in who) return who.error;
  return `${who.tenant} as ${who.email}`;
}

/** A `#token=…` link arrived while someone is signed in: switch only if the user says so. */
export function SwitchTenant({ current, next }: { current: string; next: string }) {
  const [now, setNow] = useState<Who>();
  const [offered, setOffered] = useState<Who>();

  useEffect(() => {
    let live = true;
    void whoIs(current).then((who) => live && setNow(who));
    void whoIs(next).then((who) => live && setOffered(who));
    return () => {
      live = false;
    };
  }, [current, next]);

  const usable = offered !== undefined && !("error" in offered);
  return (
    <main className="signin">
      <div className="signin-card" role="dialog" aria-modal="true" aria-labelledby="switch-title">
        <h1 id="switch-title">Switch tenants?</h1>
        <p>A link asks to sign you in with another token. Only switch if you meant to open it.</p>
        <dl className="switch">
          <dt>Signed in to</dt>
          <dd data-testid="switch-current">{describe(now)}</dd>
          <dt>The link signs in to</dt>
          <dd data-testid="switch-next">{describe(offered)}</dd>
        </dl>
        <div className="actions">
          <button type="button" className="primary" onClick={() => answerPendingSwitch(false)} autoFocus>
            Stay signed in
          </button>
          <button type="button" disabled={!usable} onClick={() => answerPendingSwitch(true)}>
            {usable ? `Switch to ${offered.tenant}` : "Switch"}
          </button>
        </div>
      </div>
    </main>
  );
}
