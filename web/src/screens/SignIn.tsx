import { type FormEvent, useState } from "react";
import { setToken, takeSignOutReason } from "../auth/token";

/** Checks a token against the API before keeping it, so a typo is told here and not later. */
async function checkToken(token: string): Promise<string | null> {
  try {
    const response = await fetch("/graphql", {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: "query SignIn { viewer { tenant { slug } } }" }),
    });
    if (response.status === 401) return "The API did not accept that token.";
    if (!response.ok) return `The API answered HTTP ${response.status}.`;
    const body = (await response.json()) as { errors?: { message: string }[] };
    return body.errors?.length ? body.errors.map((e) => e.message).join("; ") : null;
  } catch {
    return "Cannot reach the API (is it running?).";
  }
}

export function SignIn() {
  const [reason] = useState(takeSignOutReason);
  const [value, setValue] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [checking, setChecking] = useState(false);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    const token = value.trim();
    if (!token) {
      setError("Paste a token first.");
      return;
    }
    setChecking(true);
    const problem = await checkToken(token);
    setChecking(false);
    if (problem) setError(problem);
    else setToken(token);
  };

  return (
    <main className="signin">
      <div className="signin-card">
        <h1>
          <span className="logo" aria-hidden="true">◐</span> Outlive
        </h1>
        <p className="muted">Sign in with an API token.</p>
        {reason && (
          <p className="note note-error" role="alert">
            {reason}
          </p>
        )}
        <form onSubmit={submit} noValidate>
          <label htmlFor="token">API token</label>
          <input
            id="token"
            name="token"
            type="password"
            autoComplete="off"
            spellCheck={false}
            value={value}
            onChange={(e) => setValue(e.target.value)}
            aria-invalid={error ? true : undefined}
            aria-describedby={error ? "token-error" : "token-hint"}
            autoFocus
          />
          {error ? (
            <p id="token-error" className="field-error" role="alert">
              {error}
            </p>
          ) : (
            <p id="token-hint" className="hint">
              <code>outlive dev</code> prints a link that signs you in to the demo tenant;{" "}
              <code>outlive token create --tenant SLUG --email EMAIL</code> makes a token.
            </p>
          )}
          <button type="submit" className="primary" disabled={checking}>
            {checking ? "Checking…" : "Sign in"}
          </button>
        </form>
      </div>
    </main>
  );
}
