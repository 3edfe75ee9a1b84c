import { useEffect, useRef, useState } from "react";
import {
  acceptInvitation,
  type AcceptAnswer,
  checkInvitation,
  type CodeCheck,
  type InvitationLink,
  REFUSAL_HEADINGS,
  setInvitation,
} from "../auth/invitation";
import { setToken } from "../auth/token";
import { navigate } from "../app/router";
import { CopyButton } from "../ui/common";

/**
 * The page an invitation email's link opens: whose tenant it is, then "Accept and sign in". The
 * answer is a new API token for the invitee, shown once, then kept in this browser. The code is
 * checked when the page opens: an expired, revoked or used one gets a page that says so at once,
 * with a way on, and a valid one names the tenant, the address and the role from the server.
 */
export function AcceptInvitation({ link }: { link: InvitationLink }) {
  const [answer, setAnswer] = useState<AcceptAnswer | null>(null);
  const [check, setCheck] = useState<CodeCheck | null | "checking">("checking");
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    let current = true;
    void checkInvitation(link.code).then((found) => {
      if (!current) return;
      setCheck(found);
      if (found && !found.valid) setAnswer({ ok: false, reason: found.reason, message: found.message });
    });
    return () => {
      current = false;
    };
  }, [link.code]);
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    document.title = "Accept the invitation · Outlive";
  }, []);
  useEffect(() => heading.current?.focus(), [answer]);

  const accept = async () => {
    setBusy(true);
    setAnswer(await acceptInvitation(link.code));
    setBusy(false);
  };
  const leave = () => setInvitation(null);
  const enter = (token: string) => {
    setToken(token);
    setInvitation(null);
    navigate("/runs", { replace: true });
  };
  const known = check !== "checking" && check?.valid ? check : null;
  const where = known?.tenantName || link.tenant || "a tenant";
  const email = known?.email || link.email;

  let body;
  if (answer?.ok) {
    body = (
      <>
        <h1 ref={heading} tabIndex={-1}>
          Welcome to {answer.tenant.name || answer.tenant.slug}
        </h1>
        <p>
          You joined <strong>{answer.tenant.name || answer.tenant.slug}</strong> as <strong>{answer.email}</strong>.
        </p>
        <div className="note secret" role="note">
          <p>
            Your API token, shown this once (this browser keeps it to sign you in; copy it to use the API or another
            browser):
          </p>
          <p>
            <code className="mono secret-value" data-testid="new-token">
              {answer.token}
            </code>{" "}
            <CopyButton value={answer.token} label="Copy token" text="Copy token" />
          </p>
        </div>
        <button type="button" className="primary" onClick={() => enter(answer.token)}>
          Open the console
        </button>
      </>
    );
  } else if (answer && answer.reason in REFUSAL_HEADINGS) {
    body = (
      <>
        <h1 ref={heading} tabIndex={-1}>
          {REFUSAL_HEADINGS[answer.reason]}
        </h1>
        <p role="alert">{answer.message}</p>
        <p>
          <button type="button" onClick={leave}>
            Sign in with an API token instead
          </button>
        </p>
      </>
    );
  } else {
    body = (
      <>
        <h1 ref={heading} tabIndex={-1}>
          Join {where} on Outlive
        </h1>
        <p>
          You are invited to <strong>{where}</strong>
          {email && (
            <>
              {" "}
              as <strong>{email}</strong>
            </>
          )}
          {known?.role && (
            <>
              {" "}
              with the role <strong>{known.role}</strong>
            </>
          )}
          . Accepting makes your account in that tenant and signs you in.
        </p>
        {answer && !answer.ok && (
          <p className="note note-error" role="alert">
            {answer.message}
          </p>
        )}
        <div className="actions">
          <button
            type="button"
            className="primary"
            disabled={busy || check === "checking"}
            onClick={() => void accept()}
          >
            {busy ? "Accepting…" : check === "checking" ? "Checking the invitation…" : "Accept and sign in"}
          </button>
          <button type="button" className="quiet" onClick={leave}>
            Not now
          </button>
        </div>
      </>
    );
  }
  return (
    <main className="signin" id="main">
      <div className="signin-card" aria-live="polite">
        <p className="muted">
          <span className="logo" aria-hidden="true">◐</span> Outlive · invitation
        </p>
        {body}
      </div>
    </main>
  );
}
